"""POST /v1/otlp/v1/traces and /v1/otlp/v1/logs: OTLP GenAI spans and log records
stored as usage records.

The mapped records go through `ingest_usage`, the very path of POST /v1/usage, so
validation, idempotency (request_id), the rejected store and the commit before
the answer are the same. Each mapped record carries its source span under `otlp`
(an unknown field, ignored when valid): a rejected one is kept with what was sent.
`ingest_usage` takes a body, so the records are written for it as NDJSON, which it
decodes a line at a time."""

from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy.orm import Session

from service import telemetry
from service.ingest import agents, genai, inflight, otlp
from service.ingest.body import UndecodableBody, decompress
from service.profiles import Profiles
from service.services.ingestion import IngestOutcome, ingest_usage
from service.services.rejected import DEFAULT_LIMITS, RejectedLimits, keep_rejected_body

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
    reservation: inflight.Reservation = inflight.UNMETERED,
    rejected_limits: RejectedLimits = DEFAULT_LIMITS,
    profiles: Profiles | None = None,
) -> OtlpOutcome:
    """The decoding is charged to `reservation`, and what is kept of the rejected
    records bounded by `rejected_limits` (both as in `ingest_usage`); `profiles`
    give coding agents' calls their TTL (`agents.to_record`)."""
    try:
        data = decompress(
            body, content_encoding, max_decompressed_bytes, admit=reservation.charge_inflated
        )
        lines, ignored = _record_lines(data, signal, encoding, reservation, profiles)
    except UndecodableBody as exc:
        keep_undecodable(session, body, signal, str(exc), received_us)
        return OtlpOutcome(rejected=1, undecodable=str(exc))
    if not lines:
        return OtlpOutcome(ignored=ignored)
    # The request and its values are gone; the lines are held while `ingest_usage`
    # decodes them.
    del data
    reservation.charge(sum(map(len, lines)))
    batch = b"\n".join(lines)
    del lines
    stored = ingest_usage(
        session,
        batch,
        content_encoding=None,
        max_decompressed_bytes=len(batch),
        received_us=received_us,
        endpoint=f"otlp/{signal}",
        reservation=reservation,
        rejected_limits=rejected_limits,
    )
    return OtlpOutcome(
        **vars(stored), ignored=ignored, error_message=_error_message(stored, signal)
    )


def _record_lines(
    data: bytes,
    signal: otlp.Signal,
    encoding: otlp.Encoding,
    reservation: inflight.Reservation,
    profiles: Profiles | None,
) -> tuple[list[bytes], int]:
    """The GenAI items and coding agents' usage events (`service.ingest.agents`) of
    the request as NDJSON records, one line each, written as
    soon as each is mapped, and how many other items it had. The decoded request is
    let go on return, before `ingest_usage` decodes the lines one at a time (kept,
    with the mapped records and one JSON array of them decoded whole, it multiplied
    what a request held)."""
    if encoding == "json":  # a tree of values, and a copy with the ids in base64
        reservation.charge_json_values(data, trees=2)
    request = otlp.decode_request(data, signal, encoding)
    lines: list[bytes] = []
    ignored = bodies = 0
    for item in otlp.items(request, signal):
        event = agents.event_of(item) if signal == "logs" else ""
        if event == agents.CLAUDE_CODE_BODY:
            bodies += 1
            fields = agents.body_fields(item)
            if fields is not None:
                agents.BODIES.offer(item, fields)
            continue
        if event:
            body = agents.BODIES.take(item) if event == agents.CLAUDE_CODE_REQUEST else None
            record = agents.to_record(item, event, body, profiles)
        elif genai.is_genai(item):
            record = genai.to_record(item)
        else:
            ignored += 1
            continue
        record["otlp"] = {"signal": signal, "item": otlp.source_json(item.source)}
        lines.append(_serialize(record))
    telemetry.count_otlp_items(signal, ignored, bodies)
    return lines, ignored


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
    keep_rejected_body(session, f"otlp/{signal}", body, reason, received_us)
    telemetry.count_ingest(session, 0, 0, 1)


def _serialize(record: dict[str, Any]) -> bytes:
    """The record as one line, written as it would be inside a JSON array: orjson
    writes at most 254 levels, and the line keeps the depth it had when the records
    were one array (what the stored rejections show did not change)."""
    try:
        return orjson.dumps([record])[1:-1]
    except (orjson.JSONEncodeError, TypeError):
        pass
    # The span under `otlp` never has that many levels (the decoders stop at fewer),
    # but `cachewatch.segments` text may parse to a deeper value: that field is
    # replaced by a note, validation rejects the record for it, and the span as sent
    # is still under `otlp`.
    for name, value in record.items():
        try:
            orjson.dumps([{name: value}])  # at its depth in the body
        except (orjson.JSONEncodeError, TypeError):
            record[name] = _UNWRITABLE
    return orjson.dumps([record])[1:-1]
