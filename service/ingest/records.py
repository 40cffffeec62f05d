"""Validation of one usage record (contract section 1) into a storable row."""

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidationInfo,
    model_validator,
)

from service.ingest.diagnoses import DIAGNOSIS_FIELDS, DIAGNOSIS_KEYS, diagnosis_fields
from service.ingest.hashing import hash_key, pack_block_hashes
from service.ingest.shapes import (
    REQUEST_OPTION_KEYS,
    USAGE_KEYS,
    Invalid,
    request_ttl,
    usage_fields,
)
from service.ingest.timestamps import check_not_future, parse_ts
from service.usage_row import TEXT_FIELD_NAMES, TEXT_FIELDS_BY_NAME

MAX_BLOCKS = 8192
MAX_SEGMENTS = 1024
MAX_ATTRIBUTES = 32
# A block's or a segment's hash given as text, and a segment's name: values inside
# the row's blob and JSON, not text columns of their own (service.usage_row).
MAX_HASH_LENGTH = 200
MAX_SEGMENT_NAME_LENGTH = 200


def _text(name: str) -> Any:
    """The length constraint of the text field `name` (`usage_row.TEXT_FIELDS`).
    A field that may be empty gets no minimum at all, not a minimum of 0, so that
    its JSON schema stays as it was."""
    field = TEXT_FIELDS_BY_NAME[name]
    return Field(min_length=field.min_length or None, max_length=field.max_length)


# Counts are stored as 64-bit integers: a larger one is refused here, not by the database.
INT64_MAX = 2**63 - 1
# Tokens per block: a 32-bit column (real engines use 16 to a few thousand).
MAX_BLOCK_SIZE = 2**31 - 1
#: The most tokens one record may count in any token field (prompt_tokens,
#: cached_tokens, cache_write_tokens, completion_tokens, prefix_tokens, a segment's
#: tokens, and all its segments' tokens together): 2^30 = 1,073,741,824, ten times
#: the largest context any model announces (100M), so no real request is refused.
#: Every stored sum is an int64 sum of such counts (a rollup's prompt tokens; what
#: is derived from them, cacheable, rewarm and written tokens, is at most the
#: prompt): 2^33 (8.6 billion) records at the bound still fit in 2^63, a whole
#: day's bucket at 99,000 requests a second, every one a billion tokens; at a
#: realistic mean of at most 2^20 tokens, 2^43 records, 10 years at 27,000 a
#: second. A larger count could not be summed exactly: the record is rejected.
#: docs/ingestion.md ("Bounds on token counts") says the same.
MAX_TOKENS = 2**30


def _at_most_max_tokens(value: int) -> int:
    """A count above MAX_TOKENS is refused by name, with the reason."""
    if value > MAX_TOKENS:
        raise ValueError(too_many_tokens(value))
    return value


def too_many_tokens(value: int) -> str:
    """Why a count of `value` tokens is refused (both ingest paths say it so)."""
    return (
        f"{value} is over {MAX_TOKENS:,} (2^30) tokens, the most one record may count: "
        "no model has such a context, and larger counts could not be summed exactly"
    )


Count = Annotated[
    StrictInt,
    Field(ge=0, json_schema_extra={"maximum": MAX_TOKENS}),
    AfterValidator(_at_most_max_tokens),
]
# A TTFT or latency beyond a year is not a measurement: refused, so that one absurd
# value cannot reach the percentiles.
MAX_MS = 365 * 86_400_000


# A cache lifetime asked for: providers offer minutes to a day (OpenAI's extended
# retention, 24 h); beyond 30 days it is a unit mistake (milliseconds sent), refused.
MAX_TTL_S = 30 * 86_400


def _number_of(unit: str) -> Callable[[Any], Any]:
    """A string is refused by name: OTLP's NaN and infinities arrive spelled as one
    (service.ingest.genai), and the record must say so, not that a type is wrong."""

    def refuse_strings(value: Any) -> Any:
        if isinstance(value, str):
            raise ValueError(f"must be a number of {unit}, not the string {value[:40]!r}")
        return value

    return refuse_strings


Millis = Annotated[
    StrictInt | StrictFloat, Field(ge=0, le=MAX_MS), BeforeValidator(_number_of("milliseconds"))
]
Seconds = Annotated[
    StrictInt | StrictFloat, Field(gt=0, le=MAX_TTL_S), BeforeValidator(_number_of("seconds"))
]
HashText = Annotated[StrictStr, Field(max_length=MAX_HASH_LENGTH)]


class Segment(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: Annotated[StrictStr, Field(min_length=1, max_length=MAX_SEGMENT_NAME_LENGTH)]
    hash: HashText | StrictInt
    tokens: Count
    # The part's hash after normalizing how it was rendered (contract section 1):
    # typed and bounded as `hash`; null is the same as leaving it out.
    norm_hash: HashText | StrictInt | None = None


def segment_row(segment: Segment) -> dict[str, Any]:
    """A segment as the row's `segments` JSON holds it: `name`, `hash`, `tokens`, and
    `norm_hash` only when the record sent one, so that a record without it is
    stored exactly as before norm_hash existed (`fast.record_values` builds the
    same dicts; tests/ingest/test_usage_row.py holds the two together)."""
    row: dict[str, Any] = {"name": segment.name, "hash": segment.hash, "tokens": segment.tokens}
    if segment.norm_hash is not None:
        row["norm_hash"] = segment.norm_hash
    return row


class UsageRecordIn(BaseModel):
    """A usage record as sent. Unknown top-level fields are ignored."""

    # (Not in the docstring, which is the JSON schema's description.) The text
    # fields' lengths are `usage_row.TEXT_FIELDS`, as on the fast path.
    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    request_id: Annotated[StrictStr, _text("request_id")]
    ts: Annotated[int, BeforeValidator(parse_ts)]
    service: Annotated[StrictStr, _text("service")]
    model: Annotated[StrictStr, _text("model")]
    prompt_tokens: Count
    cached_tokens: Count = 0
    completion_tokens: Count | None = None
    ttft_ms: Millis | None = None
    latency_ms: Millis | None = None
    replica: Annotated[StrictStr, _text("replica")] | None = None
    deploy: Annotated[StrictStr, _text("deploy")] | None = None
    session_id: Annotated[StrictStr, _text("session_id")] | None = None
    cache_key: Annotated[StrictStr, _text("cache_key")] | None = None
    tenant: Annotated[StrictStr, _text("tenant")] | None = None
    block_size: Annotated[StrictInt, Field(gt=0, le=MAX_BLOCK_SIZE)] | None = None
    block_hashes: (
        Annotated[
            list[HashText | StrictInt],
            Field(max_length=MAX_BLOCKS),
        ]
        | None
    ) = None
    prefix_hash: Annotated[StrictStr, _text("prefix_hash")] | None = None
    prefix_tokens: Count | None = None
    segments: Annotated[list[Segment], Field(max_length=MAX_SEGMENTS)] | None = None
    attributes: (
        Annotated[
            dict[StrictStr, StrictStr | StrictBool | StrictInt | StrictFloat],
            Field(max_length=MAX_ATTRIBUTES),
        ]
        | None
    ) = None
    cache_write_tokens: Count = 0
    cache_ttl_s: Seconds | None = None
    provider: Annotated[StrictStr, _text("provider")] | None = None
    scenario: Annotated[StrictStr, _text("scenario")] | None = None
    cache_write_1h_tokens: Count | None = None
    provider_miss_reason: Annotated[StrictStr, _text("provider_miss_reason")] | None = None
    provider_missed_tokens: Count | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_provider_usage(cls, data: Any) -> Any:
        """The fields of the provider's usage object (`service.ingest.shapes`) under
        the record's own, which win even when null."""
        if not isinstance(data, dict):
            return data
        for key in USAGE_KEYS:
            usage = data.get(key)
            if isinstance(usage, dict):
                derived = usage_fields(
                    usage, key, data.get("replica"), "cache_write_tokens" in data
                )
                for name, value in derived.items():
                    if isinstance(value, Invalid) and name not in data:
                        raise ValueError(value.message)
                return _from_diagnosis(_from_request_options({**derived, **data}))
        return _from_diagnosis(_from_request_options(data))

    @model_validator(mode="after")
    def _check_consistency(self, info: ValidationInfo) -> "UsageRecordIn":
        # PostgreSQL text cannot hold NUL; refuse it here rather than fail the batch.
        for name in TEXT_FIELD_NAMES:
            value = getattr(self, name)
            if value is not None and "\x00" in value:
                raise ValueError(f"{name} must not contain NUL characters")
        if self.cached_tokens > self.prompt_tokens:
            raise ValueError("cached_tokens must not exceed prompt_tokens")
        if self.cache_write_tokens > self.prompt_tokens - self.cached_tokens:
            raise ValueError("cache_write_tokens must not exceed prompt_tokens - cached_tokens")
        one_hour = self.cache_write_1h_tokens
        if one_hour is not None and one_hour > self.cache_write_tokens:
            raise ValueError("cache_write_1h_tokens must not exceed cache_write_tokens")
        if self.block_hashes is not None and self.block_size is None:
            raise ValueError("block_hashes needs block_size")
        if self.prefix_hash is not None and self.prefix_tokens is None:
            raise ValueError("prefix_hash needs prefix_tokens")
        if self.segments is not None:
            total = sum(segment.tokens for segment in self.segments)
            if total > MAX_TOKENS:
                raise ValueError(f"segments: their tokens together: {too_many_tokens(total)}")
        # Validated as received (`received_context`): not after the server's clock.
        if isinstance(info.context, dict) and "received_us" in info.context:
            check_not_future(self.ts, info.context["received_us"])
        return self


def _from_request_options(data: dict[str, Any]) -> dict[str, Any]:
    """`cache_ttl_s` from OpenAI's request parameters on the record
    (`shapes.request_ttl`), where neither the record nor its usage gave one."""
    if "cache_ttl_s" in data or not any(k in data for k in REQUEST_OPTION_KEYS):
        return data
    ttl = request_ttl(data.get("prompt_cache_retention"), data.get("prompt_cache_options"))
    if isinstance(ttl, Invalid):
        raise ValueError(ttl.message)
    return data if ttl is None else {**data, "cache_ttl_s": ttl}


def _from_diagnosis(data: dict[str, Any]) -> dict[str, Any]:
    """`provider_miss_reason` and `provider_missed_tokens` from the provider's own
    diagnosis on the record (`diagnoses.diagnosis_fields`), where the record gives
    neither."""
    if not any(k in data for k in DIAGNOSIS_KEYS) or any(k in data for k in DIAGNOSIS_FIELDS):
        return data
    fields = diagnosis_fields(*(data.get(k) for k in DIAGNOSIS_KEYS))
    if isinstance(fields, Invalid):
        raise ValueError(fields.message)
    return {**data, **fields} if fields else data


def received_context(received_us: int) -> dict[str, int]:
    """The validation context of a record received at `received_us`:
    `UsageRecordIn.model_validate(value, context=received_context(t))`."""
    return {"received_us": received_us}


def format_validation_error(error: ValidationError) -> str:
    parts = []
    for item in error.errors(include_url=False, include_input=False):
        where = ".".join(str(p) for p in item["loc"])
        message = item["msg"].removeprefix("Value error, ")
        parts.append(f"{where}: {message}" if where else message)
    return "; ".join(parts)


def to_row(record: UsageRecordIn, received_us: int) -> dict[str, Any]:
    """The validated record as a `usage_records` row: its fields under their own
    names (copied from `__dict__`, twice as fast as 26 attribute reads; this runs
    once per record), `ts` as `ts_us`, hashes packed, plus the derived columns."""
    row = dict(record.__dict__)
    row["ts_us"] = row.pop("ts")
    row["received_us"] = received_us
    if record.block_hashes is not None:
        row["block_hashes"] = pack_block_hashes(record.block_hashes)
    row["prefix_key"] = hash_key(record.prefix_hash) if record.prefix_hash is not None else None
    if record.segments is not None:
        row["segments"] = [segment_row(s) for s in record.segments]
    return row
