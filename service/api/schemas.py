"""Answer shapes, so the OpenAPI schema tells clients exactly what comes back."""

from typing import Any, Literal

from pydantic import BaseModel


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


class CapacityPoint(BaseModel):
    tokens: int
    hit_rate: float | None


class CapacityOut(BaseModel):
    model: str | None
    requests: int
    block_size: int | None
    ceiling: float | None
    points: list[CapacityPoint]


def _strings(max_length: int) -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "maxLength": max_length}


# POST /v1/usage reads its body raw (NDJSON, JSON, gzip: docs/ingestion.md), so
# FastAPI cannot derive this; declared so that clients and fuzzers see the records.
USAGE_RECORD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["request_id", "ts", "service", "model"],
    "properties": {
        "request_id": _strings(200),
        "ts": {"anyOf": [{"type": "string", "format": "date-time"}, {"type": "number"}]},
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
        "attributes": {
            "type": "object",
            "maxProperties": 32,
            "additionalProperties": {
                "anyOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]
            },
        },
    },
}


def json_body(schema: dict[str, Any]) -> dict[str, Any]:
    """`openapi_extra` for an endpoint that takes one item or an array of them."""
    one_or_many = {"anyOf": [schema, {"type": "array", "items": schema}]}
    return {
        "requestBody": {"required": True, "content": {"application/json": {"schema": one_or_many}}}
    }
