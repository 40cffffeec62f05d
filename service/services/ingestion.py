"""POST /v1/usage: decode a body, validate each record, store the new ones and keep
every rejected one with its reason."""

from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from service import repository, telemetry
from service.ingest.body import BodyItem, UndecodableBody, decompress, split_records
from service.ingest.bulk import bulk_values
from service.ingest.fast import convert_value, record_row
from service.ingest.litellm import convert_item, is_litellm_payload
from service.ingest.records import UsageRecordIn, format_validation_error, to_row

MAX_REPORTED_ERRORS = 100
USAGE_ENDPOINT = "usage"


@dataclass
class IngestOutcome:
    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    # Set when the body could not be decoded at all (the answer is 400).
    undecodable: str | None = None


def ingest_usage(
    session: Session,
    body: bytes,
    *,
    content_encoding: str | None,
    max_decompressed_bytes: int,
    received_us: int,
    endpoint: str = USAGE_ENDPOINT,
) -> IngestOutcome:
    """`endpoint` labels the rejected records (OTLP's mapped records pass through here
    too, and a user reading /v1/rejected should see where they came from)."""
    try:
        data = decompress(body, content_encoding, max_decompressed_bytes)
        # The common body, every line a valid record: decoded and stored in bulk.
        bulk = bulk_values(data, received_us)
        if bulk is not None:
            return _store_bulk(session, bulk)
        items = split_records(data)
    except UndecodableBody as exc:
        repository.add_rejected(
            session,
            [_rejected_row(endpoint, received_us, None, None, str(exc), body)],
        )
        telemetry.count_ingest(session, 0, 0, 1)
        return IngestOutcome(rejected=1, undecodable=str(exc))

    outcome = IngestOutcome()
    rows: list[dict[str, Any]] = []
    rejected_rows: list[dict[str, Any]] = []
    seen_ids: set[str] = set()
    for item in items:
        row, reason = _validate(item, received_us)
        if row is None:
            request_id = _request_id_of(item.value)
            reason = reason or "invalid record"
            rejected_rows.append(
                _rejected_row(
                    endpoint, received_us, item.index, request_id, reason, item.verbatim()
                )
            )
            if len(outcome.errors) < MAX_REPORTED_ERRORS:
                outcome.errors.append(
                    {"index": item.index, "request_id": request_id, "error": reason}
                )
        elif row["request_id"] in seen_ids:
            outcome.duplicates += 1  # a repeat within this body: first one wins
        else:
            seen_ids.add(row["request_id"])
            rows.append(row)

    outcome.accepted = repository.insert_usage_rows(session, rows)
    outcome.duplicates += len(rows) - outcome.accepted
    outcome.rejected = len(rejected_rows)
    repository.add_rejected(session, rejected_rows)
    telemetry.count_ingest(session, outcome.accepted, outcome.duplicates, outcome.rejected)
    return outcome


def _store_bulk(session: Session, values: list[tuple[Any, ...]]) -> IngestOutcome:
    """Store the rows of a body that `bulk_values` took whole: the first of each
    request_id in the body, minus those already stored."""
    unique = values
    if len({v[0] for v in values}) != len(values):
        first: dict[str, tuple[Any, ...]] = {}
        for v in values:
            first.setdefault(v[0], v)  # a repeat within this body: first one wins
        unique = list(first.values())
    accepted = repository.insert_usage_values(session, unique)
    outcome = IngestOutcome(accepted=accepted, duplicates=len(values) - accepted)
    telemetry.count_ingest(session, outcome.accepted, outcome.duplicates, 0)
    return outcome


def _validate(item: BodyItem, received_us: int) -> tuple[dict[str, Any] | None, str | None]:
    if item.error is not None:
        return None, item.error
    # LiteLLM's generic_api payload: mapped to a record first (service.ingest.litellm).
    if item.record is None and is_litellm_payload(item.value) and (r := convert_item(item)):
        return None, r
    # The fast path (msgspec) first; whatever it declines, pydantic decides and
    # explains: both accept the same records and build the same rows.
    record = item.record
    if record is None and type(item.value) is dict:
        record = convert_value(item.value)
    if record is not None:
        row = record_row(record, received_us)
        if row is not None:
            return row, None
    if not isinstance(item.value, dict):
        return None, "a record must be a JSON object"
    try:
        return to_row(UsageRecordIn.model_validate(item.value), received_us), None
    except ValidationError as exc:
        return None, format_validation_error(exc)


def _request_id_of(value: Any) -> str | None:
    if isinstance(value, dict):
        request_id = value.get("request_id")
        if isinstance(request_id, str) and 0 < len(request_id) <= 200 and "\x00" not in request_id:
            return request_id
    return None


def _rejected_row(
    endpoint: str,
    received_us: int,
    index: int | None,
    request_id: str | None,
    reason: str,
    raw: bytes,
) -> dict[str, Any]:
    return {
        "received_us": received_us,
        "endpoint": endpoint,
        "batch_index": index,
        "request_id": request_id,
        "reason": reason[:2000],
        "raw": raw,
    }
