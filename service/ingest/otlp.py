"""OTLP/HTTP request bodies (protobuf or OTLP JSON) decoded with the
`opentelemetry-proto` types, flattened into one `OtlpItem` per span or log record.

OTLP JSON differs from protobuf's canonical JSON mapping in one place: trace and
span ids are hex, not base64. They are rewritten before `json_format.ParseDict`,
which then does all the parsing (camelCase or original field names, int64 as
strings, enums as ints, unknown fields ignored: the OTLP/HTTP specification)."""

import base64
import binascii
import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from google.rpc import status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from service.ingest.body import UndecodableBody

Signal = Literal["traces", "logs"]
Encoding = Literal["protobuf", "json"]

MEDIA_TYPES: dict[str, Encoding] = {
    "application/x-protobuf": "protobuf",
    "application/protobuf": "protobuf",
    "application/json": "json",
}
# google.rpc.Code.INVALID_ARGUMENT: what an OTLP server answers a malformed body.
INVALID_ARGUMENT = 3
# Paths (in OTLP JSON) whose values are hex ids; bytes elsewhere stay base64.
_ID_KEYS = ("traceId", "trace_id", "spanId", "span_id", "parentSpanId", "parent_span_id")


class UnsupportedMediaType(Exception):
    """Content-Type is neither OTLP protobuf nor OTLP JSON (answer 415)."""


def body_encoding(content_type: str | None) -> Encoding:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media not in MEDIA_TYPES:
        raise UnsupportedMediaType(
            f"unsupported Content-Type {content_type!r}: "
            "use application/x-protobuf or application/json"
        )
    return MEDIA_TYPES[media]


@dataclass
class OtlpItem:
    """One span or log record with what the GenAI mapping reads. `source` is the
    original message, serialized only if the item ends up rejected."""

    attributes: dict[str, Any]
    resource: dict[str, Any]
    trace_id: str
    span_id: str
    start_ns: int
    end_ns: int
    source: Message
    # (name, time in ns) of each span event, in order.
    events: list[tuple[str, int]] = field(default_factory=list)
    # A log record's event name: its `event_name` field, else a string body (how
    # Claude Code names its events: body "claude_code.api_request").
    event_name: str = ""


def decode_request(data: bytes | bytearray, signal: Signal, encoding: Encoding) -> Message:
    request: Message = (
        ExportTraceServiceRequest() if signal == "traces" else ExportLogsServiceRequest()
    )
    if encoding == "protobuf":
        try:
            request.ParseFromString(bytes(data))
        except (DecodeError, RecursionError, ValueError) as exc:
            raise UndecodableBody(f"body is not an OTLP protobuf {signal} request: {exc}") from None
        return request
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise UndecodableBody(f"body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise UndecodableBody(f"an OTLP JSON {signal} request must be a JSON object")
    try:
        json_format.ParseDict(_ids_to_base64(value), request, ignore_unknown_fields=True)
    except (json_format.ParseError, RecursionError, ValueError, TypeError) as exc:
        raise UndecodableBody(f"body is not an OTLP JSON {signal} request: {exc}") from None
    return request


def _ids_to_base64(value: Any, depth: int = 0) -> Any:
    """Hex trace/span ids (OTLP JSON) as base64 (protobuf JSON) for ParseDict."""
    if depth > 200:
        raise UndecodableBody("OTLP JSON request is nested too deeply")
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in _ID_KEYS and isinstance(item, str):
                try:
                    item = base64.b64encode(bytes.fromhex(item)).decode("ascii")
                except ValueError:
                    raise UndecodableBody(f"{key} {item[:64]!r} is not hex") from None
            else:
                item = _ids_to_base64(item, depth + 1)
            out[key] = item
        return out
    if isinstance(value, list):
        return [_ids_to_base64(item, depth + 1) for item in value]
    return value


def any_value(value: AnyValue, depth: int = 0) -> Any:
    """An attribute value as plain JSON-able Python (bytes as hex)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [any_value(v, depth + 1) for v in value.array_value.values]
    if kind == "kvlist_value":
        return attributes_dict(value.kvlist_value.values, depth + 1)
    if kind == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, kind)


def attributes_dict(pairs: Iterable[KeyValue], depth: int = 0) -> dict[str, Any]:
    """KeyValue list as a dict (a repeated key: the last one wins, as in the SDKs)."""
    return {pair.key: any_value(pair.value, depth) for pair in pairs}


def spans(request: ExportTraceServiceRequest) -> Iterator[OtlpItem]:
    for resource_spans in request.resource_spans:
        resource = attributes_dict(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield OtlpItem(
                    attributes=attributes_dict(span.attributes),
                    resource=resource,
                    trace_id=span.trace_id.hex(),
                    span_id=span.span_id.hex(),
                    start_ns=span.start_time_unix_nano,
                    end_ns=span.end_time_unix_nano,
                    source=span,
                    events=[(e.name, e.time_unix_nano) for e in span.events],
                )


def log_records(request: ExportLogsServiceRequest) -> Iterator[OtlpItem]:
    for resource_logs in request.resource_logs:
        resource = attributes_dict(resource_logs.resource.attributes)
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                attributes = attributes_dict(record.attributes)
                body = any_value(record.body)
                if isinstance(body, dict):  # some emitters put the event's fields in the body
                    attributes = {**body, **attributes}
                moment = record.time_unix_nano or record.observed_time_unix_nano
                yield OtlpItem(
                    attributes=attributes,
                    resource=resource,
                    trace_id=record.trace_id.hex(),
                    span_id=record.span_id.hex(),
                    start_ns=moment,
                    end_ns=0,
                    source=record,
                    event_name=record.event_name or (body if isinstance(body, str) else ""),
                )


def items(request: Message, signal: Signal) -> Iterator[OtlpItem]:
    if signal == "traces":
        assert isinstance(request, ExportTraceServiceRequest)
        return spans(request)
    assert isinstance(request, ExportLogsServiceRequest)
    return log_records(request)


def source_json(message: Message) -> Any:
    """The span or log record as OTLP JSON (hex ids), for the rejected store."""
    value = json_format.MessageToDict(message)
    for key in ("traceId", "spanId", "parentSpanId"):
        if isinstance(value.get(key), str):
            with contextlib.suppress(binascii.Error, ValueError):
                value[key] = base64.b64decode(value[key]).hex()
    return value


def export_response(signal: Signal, rejected: int, error_message: str) -> Message:
    """The success answer; `partial_success` only when something was rejected."""
    if signal == "traces":
        traces = ExportTraceServiceResponse()
        if rejected:
            traces.partial_success.CopyFrom(
                ExportTracePartialSuccess(rejected_spans=rejected, error_message=error_message)
            )
        return traces
    logs = ExportLogsServiceResponse()
    if rejected:
        logs.partial_success.CopyFrom(
            ExportLogsPartialSuccess(rejected_log_records=rejected, error_message=error_message)
        )
    return logs


def status(message: str, code: int = INVALID_ARGUMENT) -> Message:
    return status_pb2.Status(code=code, message=message[:2000])


def encode(message: Message, encoding: Encoding) -> tuple[bytes, str]:
    """Body and Content-Type of an answer in the request's encoding."""
    if encoding == "protobuf":
        return message.SerializeToString(), "application/x-protobuf"
    return orjson.dumps(json_format.MessageToDict(message)), "application/json"
