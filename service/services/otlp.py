"""POST /v1/otlp/v1/traces and /v1/otlp/v1/logs: OTLP GenAI spans and log records
stored as usage records.

The mapped records go through `ingest_usage`, the very path of POST /v1/usage, so
validation, idempotency (request_id), the rejected store and the commit before
the answer are the same. Each mapped record carries its source span under `otlp`
(an unknown field, ignored when valid): a rejected one is kept with what was sent."""

import json
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy.orm import Session

from service import repository, telemetry
from service.ingest import genai, otlp
from service.ingest.body import UndecodableBody, decompress
from service.services.ingestion import ingest_usage

MAX_ERROR_MESSAGES = 5


@dataclass
class OtlpOutcome:
    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0
    # Items of the request that are not GenAI calls: not stored, not rejected.
    ignored: int = 0
    error_message: str = ""
    # Set when the body could not be decoded at all (the answer is 400).
    undecodable: str | None = None


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
    outcome = OtlpOutcome()
    for item in otlp.items(request, signal):
        if not genai.is_genai(item):
            outcome.ignored += 1
            continue
        record = genai.to_record(item)
        record["otlp"] = {"signal": signal, "item": otlp.source_json(item.source)}
        records.append(record)
    if not records:
        return outcome

    batch = _serialize(records)
    stored = ingest_usage(
        session,
        batch,
        content_encoding=None,
        max_decompressed_bytes=len(batch),
        received_us=received_us,
        endpoint=f"otlp/{signal}",
    )
    outcome.accepted = stored.accepted
    outcome.duplicates = stored.duplicates
    outcome.rejected = stored.rejected
    if stored.errors:
        noun = "span" if signal == "traces" else "log record"
        shown = [
            f"{noun} {e['request_id'] or e['index']}: {e['error']}"
            for e in stored.errors[:MAX_ERROR_MESSAGES]
        ]
        more = stored.rejected - len(shown)
        outcome.error_message = "; ".join(shown) + (f"; and {more} more" if more > 0 else "")
        outcome.error_message += " (kept in GET /v1/rejected)"
    return outcome


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
    # A source too deeply nested for orjson: keep it as OTLP JSON text instead.
    for record in records:
        try:
            orjson.dumps(record)
        except (orjson.JSONEncodeError, TypeError):
            source = record["otlp"]["item"]
            record["otlp"]["item"] = json.dumps(source)
    return orjson.dumps(records)
