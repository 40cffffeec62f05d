"""POST /v1/otlp/v1/traces and /v1/otlp/v1/logs: OTLP GenAI spans and log records
stored as usage records.

The mapped records go through `ingest_usage`, the very path of POST /v1/usage, so
validation, idempotency (request_id), the rejected store and the commit before
the answer are the same. Each mapped record carries its source span under `otlp`
(an unknown field, ignored when valid): a rejected one is kept with what was sent.
`ingest_usage` takes a body, so the records are written as one JSON array for it."""

from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy.orm import Session

from service import repository, telemetry
from service.ingest import genai, otlp
from service.ingest.body import UndecodableBody, decompress
from service.services.ingestion import IngestOutcome, ingest_usage

MAX_ERROR_MESSAGES = 5
_UNWRITABLE = "(a value nested too deeply to store)"


@dataclass
class OtlpOutcome(IngestOutcome):
    """What `ingest_usage` made of the mapped records, and what OTLP's answer adds."""

    # Items of the request that are not GenAI calls: not stored, not rejected.
    ignored: int = 0
    # `partial_success.error_message`: the first rejections, for the exporter's log.
    error_message: str = ""


def ingest_otlp(
    session: Session,
    body: bytes,
    *,
    signal: otlp.Signal,
    encoding: otlp.Encoding,
    content_encoding: str | None,
    max_decompressed_bytes: int,
    received_us: int,
) -> OtlpOutcome:
    try:
        data = decompress(body, content_encoding, max_decompressed_bytes)
        request = otlp.decode_request(data, signal, encoding)
    except UndecodableBody as exc:
        keep_undecodable(session, body, signal, str(exc), received_us)
        return OtlpOutcome(rejected=1, undecodable=str(exc))

    records: list[dict[str, Any]] = []
    ignored = 0
    for item in otlp.items(request, signal):
        if not genai.is_genai(item):
            ignored += 1
            continue
        record = genai.to_record(item)
        record["otlp"] = {"signal": signal, "item": otlp.source_json(item.source)}
        records.append(record)
    if not records:
        return OtlpOutcome(ignored=ignored)

    batch = _serialize(records)
    stored = ingest_usage(
        session,
        batch,
        content_encoding=None,
        max_decompressed_bytes=len(batch),
        received_us=received_us,
        endpoint=f"otlp/{signal}",
    )
    return OtlpOutcome(
        **vars(stored), ignored=ignored, error_message=_error_message(stored, signal)
    )


def _error_message(stored: IngestOutcome, signal: otlp.Signal) -> str:
    if not stored.errors:
        return ""
    noun = "span" if signal == "traces" else "log record"
    shown = [
        f"{noun} {e['request_id'] or e['index']}: {e['error']}"
        for e in stored.errors[:MAX_ERROR_MESSAGES]
    ]
    more = stored.rejected - len(shown)
    return (
        "; ".join(shown)
        + (f"; and {more} more" if more > 0 else "")
        + " (kept in GET /v1/rejected)"
    )


def keep_undecodable(
    session: Session, body: bytes, signal: otlp.Signal, reason: str, received_us: int
) -> None:
    """A body answered 400 or 415 is kept as sent: nothing is dropped silently."""
    repository.add_rejected(
        session,
        [
            {
                "received_us": received_us,
                "endpoint": f"otlp/{signal}",
                "batch_index": None,
                "request_id": None,
                "reason": reason[:2000],
                "raw": body,
            }
        ],
    )
    telemetry.count_ingest(session, 0, 0, 1)


def _serialize(records: list[dict[str, Any]]) -> bytes:
    try:
        return orjson.dumps(records)
    except (orjson.JSONEncodeError, TypeError):
        pass
    # orjson writes at most 254 levels. The span under `otlp` never has that many
    # (the decoders stop at fewer), but `cachewatch.segments` text may parse to a
    # deeper value: that field is replaced by a note, validation rejects the record
    # for it, and the span as sent is still under `otlp`.
    for record in records:
        for name, value in record.items():
            try:
                orjson.dumps([{name: value}])  # at its depth in the body
            except (orjson.JSONEncodeError, TypeError):
                record[name] = _UNWRITABLE
    return orjson.dumps(records)
