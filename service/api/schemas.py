"""Answer shapes, so the OpenAPI schema tells clients exactly what comes back."""

from typing import Any, Literal, get_args

from pydantic import BaseModel

from service.api.patterns import RFC3339, TS_TEXT, anchored
from service.ingest.body import GZIP_ENCODINGS, PLAIN_ENCODINGS
from service.ingest.otlp import MEDIA_TYPES as OTLP_MEDIA_TYPES
from service.ingest.records import (
    MAX_HASH_LENGTH,
    MAX_SEGMENT_NAME_LENGTH,
    MAX_SEGMENTS,
    MAX_TTL_S,
)
from service.ingest.timestamps import EPOCH_NUMBER_RANGES, MAX_YEAR, MIN_YEAR
from service.services.events import REQUIRED_BY_KIND, EventIn, EventKind
from service.usage_row import TEXT_FIELDS_BY_NAME


class RecordError(BaseModel):
    index: int
    request_id: str | None
    error: str


class IngestAnswer(BaseModel):
    accepted: int
    duplicates: int
    rejected: int
    errors: list[RecordError]


class ErrorAnswer(BaseModel):
    error: str


class EventOut(BaseModel):
    id: int
    ts: str
    service: str
    kind: str
    model: str | None
    deploy: str | None
    replicas: int | None
    description: str | None
    source: str


class RejectedOut(BaseModel):
    id: int
    received_at: str
    endpoint: str
    index: int | None
    request_id: str | None
    reason: str
    raw: str
    raw_encoding: str


class Health(BaseModel):
    """The health check's answer: only that the service and its database answer."""

    status: Literal["ok"]


class Detail(BaseModel):
    """FastAPI's own error body (an HTTPException, a request that fails validation):
    a message, or the list of what failed."""

    detail: str | list[dict[str, Any]]


# Declared on every router so that the schema lists every answer an endpoint can
# give (clients and schemathesis rely on it), not only the successful one.
AUTH_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": Detail, "description": "No token, or an unknown or revoked one"},
    403: {"model": Detail, "description": "The token lacks the scope"},
}
UNAVAILABLE: dict[int | str, dict[str, Any]] = {
    503: {"model": ErrorAnswer, "description": "Database unavailable or busy: retry later"},
}
INVALID: dict[int | str, dict[str, Any]] = {
    422: {"model": Detail, "description": "Invalid parameters"},
}
READ_ERRORS = {**AUTH_ERRORS, **INVALID, **UNAVAILABLE}
WRITE_ERRORS = {
    **READ_ERRORS,
    400: {"model": ErrorAnswer, "description": "The body cannot be decoded"},
    413: {"model": ErrorAnswer, "description": "The body is too large"},
}


class RpcStatus(BaseModel):
    """google.rpc.Status, the OTLP/HTTP error body (as JSON; protobuf likewise)."""

    code: int
    message: str


_PROTOBUF: dict[str, Any] = {"application/x-protobuf": {}}
OTLP_ERRORS: dict[int | str, dict[str, Any]] = {
    **AUTH_ERRORS,
    **INVALID,
    **UNAVAILABLE,
    200: {"content": _PROTOBUF, "description": "Export*ServiceResponse"},
    400: {"model": RpcStatus, "content": _PROTOBUF, "description": "The body cannot be decoded"},
    413: WRITE_ERRORS[413],
    415: {"model": RpcStatus, "description": "Neither protobuf nor JSON"},
}


def otlp_body(message: str) -> dict[str, Any]:
    """`openapi_extra` of an OTLP receiver: a serialized `message` in protobuf. Only
    the protobuf media types are declared: OTLP JSON (also accepted) has no JSON
    Schema that says which objects ParseDict takes, and a looser one would claim
    bodies the server refuses."""
    binary = {
        "schema": {"type": "string", "format": "binary", "description": f"a serialized {message}"}
    }
    media_types = [m for m, encoding in OTLP_MEDIA_TYPES.items() if encoding == "protobuf"]
    return {"requestBody": {"required": True, "content": {m: binary for m in media_types}}}


class Stretch(BaseModel):
    """A regression's before or after side (contract section 5)."""

    hit_rate: float | None
    cacheable_fraction: float | None
    rewarm_share: float | None
    unique_prefix_ratio: float | None


class Attribution(BaseModel):
    event_id: int
    kind: str
    deploy: str | None
    replicas: int | None
    ts: str
    source: str
    lag_s: float


class Cost(BaseModel):
    """A regression's cost in dollars a day (contract section 5)."""

    usd_per_day_before: float
    usd_per_day_after: float
    extra_usd_per_day: float


class RegressionOut(BaseModel):
    id: int
    service: str
    model: str
    change_ts: str
    detected_at: str
    status: str
    resolved_at: str | None
    before: Stretch
    after: Stretch
    attributed_to: Attribution | None
    cause: str
    evidence: list[str]
    cost: Cost | None
    group: dict[str, str] | None = None
    canary: dict[str, Any] | None = None


class CapacityPoint(BaseModel):
    tokens: int
    hit_rate: float | None


class CapacitySample(BaseModel):
    """How a sampled curve was made (a ClickHouse deployment replays a SHARDS sample
    of the blocks: service.services.capacity): its rate, what it replayed, and per
    point, in the order of `points`: the standard error over the sampled keys, the
    half-width of an approximate `confidence` interval (`error_meaning` says how it
    is made), and why a point has no estimate."""

    rate: float
    sampled_accesses: int
    sampled_keys: int
    ceiling_stderr: float | None
    stderr: list[float | None]
    confidence: float | None = None
    ceiling_error: float | None = None
    error: list[float | None] | None = None
    no_estimate: list[str | None] | None = None
    error_meaning: str | None = None


class CapacityOut(BaseModel):
    model: str | None
    requests: int
    block_size: int | None
    ceiling: float | None
    points: list[CapacityPoint]
    # Only when the curve is sampled rather than replayed exactly.
    sample: CapacitySample | None = None


NO_NUL = r"^[^\x00]*$"


def _strings(max_length: int) -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "maxLength": max_length}


def _text(min_length: int, max_length: int) -> dict[str, Any]:
    """A string stored as text: PostgreSQL holds no NUL, so none is accepted."""
    return {"type": "string", "minLength": min_length, "maxLength": max_length, "pattern": NO_NUL}


#: `ts` in a JSON body (records, events): RFC 3339 or an epoch number, exactly the
#: range service.ingest.timestamps accepts (the pattern: service.api.patterns).
TS_SCHEMA: dict[str, Any] = {
    "description": (
        f"RFC 3339 (`T`, `t` or a space; 1-9 digits of fraction; no offset is UTC), "
        f"years {MIN_YEAR}-{MAX_YEAR} as written; or an epoch number before "
        f"{MAX_YEAR + 1}: seconds, above 1e11 milliseconds, above 1e14 microseconds, "
        "above 1e17 nanoseconds"
    ),
    "anyOf": [
        {"type": "string", "pattern": anchored(RFC3339)},
        *(
            {
                "type": "number",
                ("minimum" if low_inclusive else "exclusiveMinimum"): low,
                "exclusiveMaximum": high,
            }
            for low, low_inclusive, high in EPOCH_NUMBER_RANGES
        ),
    ],
}
#: `from`/`to` in a query string: the same times, epoch numbers in decimal digits;
#: empty means no bound.
TS_TEXT_PATTERN = anchored(TS_TEXT)


def _content_encoding_pattern(encodings: tuple[str, ...]) -> str:
    """One of `encodings` in any letter case, or none, and after it the whitespace
    the server strips (str.strip, in the latin-1 a header value decodes to). None
    before it: HTTP strips a value's leading whitespace before any server sees it,
    and clients refuse to send it."""
    space = "[" + "".join(f"\\x{c:02x}" for c in range(256) if chr(c).isspace()) + "]*"
    spelled = "|".join(
        "".join(f"[{ch.lower()}{ch.upper()}]" if ch.isalpha() else ch for ch in word)
        for word in encodings
    )
    return f"^(?:(?:{spelled}){space})?$"


#: Content-Encoding of a body: gzip (or its old name) or none
#: (service.ingest.body.decompress; the body is then gunzipped).
CONTENT_ENCODING_PATTERN = _content_encoding_pattern(
    tuple(e for e in (*PLAIN_ENCODINGS, *GZIP_ENCODINGS) if e)
)


#: A segment's `hash` and `norm_hash`: text of at most MAX_HASH_LENGTH characters,
#: or an integer (JSON parsers read one beyond 64 bits inexactly: send it as text).
_SEGMENT_HASH: list[dict[str, Any]] = [
    {"type": "string", "maxLength": MAX_HASH_LENGTH},
    {"type": "integer"},
]
#: One part of the request's start (contract section 1, service.ingest.records.Segment).
SEGMENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name", "hash", "tokens"],
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": MAX_SEGMENT_NAME_LENGTH},
        "hash": {"anyOf": _SEGMENT_HASH},
        "tokens": {"type": "integer", "minimum": 0},
        "norm_hash": {
            "anyOf": [*_SEGMENT_HASH, {"type": "null"}],
            "description": (
                "the part's hash after normalizing how it was rendered (whitespace and "
                "newlines, JSON key order, image `detail`, URL query strings): two "
                "renderings of one prompt share it and differ in `hash`; stored only "
                "when sent (null: not sent)"
            ),
        },
    },
}


# POST /v1/usage reads its body raw (NDJSON, JSON, gzip: docs/ingestion.md), so
# FastAPI cannot derive this; declared so that clients and fuzzers see the records.
USAGE_RECORD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["request_id", "ts", "service", "model"],
    "properties": {
        "request_id": _strings(200),
        "ts": TS_SCHEMA,
        "service": _strings(100),
        "model": _strings(200),
        "prompt_tokens": {"type": "integer", "minimum": 0},
        "cached_tokens": {"type": "integer", "minimum": 0},
        "ttft_ms": {"type": "number", "minimum": 0},
        "replica": _strings(200),
        "deploy": _strings(200),
        "block_size": {"type": "integer", "minimum": 1},
        "block_hashes": {
            "type": "array",
            "maxItems": 8192,
            "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        },
        "prefix_hash": _strings(200),
        "prefix_tokens": {"type": "integer", "minimum": 0},
        "session_id": _strings(200),
        "segments": {"type": "array", "maxItems": MAX_SEGMENTS, "items": SEGMENT_SCHEMA},
        # Contract section 1's managed-provider fields, with the stored limits.
        "cache_write_tokens": {"type": "integer", "minimum": 0},
        "cache_write_1h_tokens": {"type": ["integer", "null"], "minimum": 0},
        "cache_ttl_s": {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TTL_S},
        # OpenAI's request parameters as sent: cache_ttl_s where the record has none.
        "prompt_cache_retention": {"enum": ["in_memory", "24h", None]},
        "prompt_cache_options": {
            "type": ["object", "null"],
            "properties": {
                "mode": {"enum": ["implicit", "explicit"]},
                "ttl": {"enum": ["30m", "12h"]},
            },
        },
        # The provider's own diagnosis of a miss, as sent (service.ingest.diagnoses),
        # or its two fields given by the caller.
        "diagnostics": {"type": ["object", "null"]},
        "prompt_cache_diagnostics": {"type": ["object", "null"]},
        "provider_miss_reason": _strings(TEXT_FIELDS_BY_NAME["provider_miss_reason"].max_length),
        "provider_missed_tokens": {"type": ["integer", "null"], "minimum": 0},
        "provider": _strings(TEXT_FIELDS_BY_NAME["provider"].max_length),
        "scenario": _strings(TEXT_FIELDS_BY_NAME["scenario"].max_length),
        "attributes": {
            "type": "object",
            "maxProperties": 32,
            "additionalProperties": {
                "anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]
            },
        },
    },
}


def _event_schema() -> dict[str, Any]:
    """What `EventIn` (service.services.events) validates, as its own JSON schema
    says, plus what its validators add: `ts` in the accepted range, no NUL in any
    text, and the field each kind needs (a 422 otherwise). Titles dropped."""
    schema = EventIn.model_json_schema()
    schema.pop("title", None)
    properties: dict[str, Any] = schema["properties"]
    for field in properties.values():
        field.pop("title", None)
        for option in field.get("anyOf", [field]):
            if option.get("type") == "string" and "enum" not in option:
                option["pattern"] = NO_NUL
    properties["ts"] = TS_SCHEMA
    others = [kind for kind in get_args(EventKind) if kind not in REQUIRED_BY_KIND]
    schema["anyOf"] = [
        {
            "properties": {"kind": {"const": kind}, field: {"not": {"type": "null"}}},
            "required": [field],
        }
        for kind, (field, _) in REQUIRED_BY_KIND.items()
    ] + [{"properties": {"kind": {"enum": others}}}]
    return schema


EVENT_SCHEMA: dict[str, Any] = _event_schema()


def json_body(schema: dict[str, Any], max_items: int | None = None) -> dict[str, Any]:
    """`openapi_extra` for an endpoint that takes one item or an array of them (of
    at most `max_items`)."""
    array: dict[str, Any] = {"type": "array", "items": schema}
    if max_items is not None:
        array["maxItems"] = max_items
    one_or_many = {"anyOf": [schema, array]}
    return {
        "requestBody": {"required": True, "content": {"application/json": {"schema": one_or_many}}}
    }


class GroupOut(BaseModel):
    """One value of a group field over a range (contract section 6, `/v1/groups`)."""

    value: str
    requests: int
    prompt_tokens: int
    cached_tokens: int
    hit_rate: float | None
    cacheable_fraction: float | None
    capture_ratio: float | None
    rewarm_tokens: int
    rewarm_share: float | None
    spend_usd: float | None
    wasted_usd: float | None
    ttft_ms: dict[str, dict[str, float | None]]


class SessionOut(BaseModel):
    """One conversation over a range (`/v1/sessions`, docs/groups.md "Sessions")."""

    session_id: str
    service: str
    models: list[str]
    tenant: str | None
    requests: int
    first_ts: str
    last_ts: str
    prompt_tokens: int
    cached_tokens: int
    hit_rate: float | None
    cache_write_tokens: int
    unread_write_tokens: int
    spend_usd: float | None
    unread_write_usd: float | None


class FoundOut(BaseModel):
    """What cachewatch found for some of a provider reason's requests."""

    found: str
    requests: int
    agrees: bool


class ReasonOut(BaseModel):
    """One provider reason: its requests, the provider's estimate of the tokens
    missed, and how many cachewatch put under the same cause and segment (`kind`
    `compared` only; the others are listed, never counted)."""

    reason: str
    kind: str
    requests: int
    missed_tokens: int
    agreed: int
    share: float | None
    cachewatch: list[FoundOut]


class DiagnosesOut(BaseModel):
    """The providers' own miss diagnoses of a range beside cachewatch's."""

    compared: int
    agreed: int
    share: float | None
    reasons: list[ReasonOut]


class FindingOut(BaseModel):
    """A finding (contract section 5b): an anti-pattern present in the range."""

    kind: str
    service: str
    model: str
    group: dict[str, str] | None
    segment: str | None
    since: str
    share_of_prompt_tokens: float
    wasted_tokens_per_day: int
    wasted_usd_per_day: float | None
    evidence: list[str]
    fix: str
