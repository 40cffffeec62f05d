"""POST /v1/usage: decode a body, validate each record, store the new ones and keep
every rejected one with its reason."""

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from service import repository, telemetry
from service.ingest import inflight
from service.ingest.body import BodyItem, UndecodableBody, decompress, iter_records
from service.ingest.bulk import NotBulk, bulk_rows
from service.ingest.fast import convert_value, record_values
from service.ingest.litellm import convert_item, is_litellm_payload
from service.ingest.records import (
    UsageRecordIn,
    format_validation_error,
    received_context,
    to_row,
)
from service.services.rejected import DEFAULT_LIMITS, RejectedKeeper, RejectedLimits, rejected_row
from service.usage_row import TEXT_FIELDS_BY_NAME

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
    reservation: inflight.Reservation = inflight.UNMETERED,
    rejected_limits: RejectedLimits = DEFAULT_LIMITS,
) -> IngestOutcome:
    """`endpoint` labels the rejected records (OTLP's mapped records pass through here
    too, and a user reading /v1/rejected should see where they came from). The
    decoding is charged to `reservation`, the request's share of the memory budget
    (`service.ingest.inflight`; outside a request, nothing). What is kept of the
    rejected records is bounded by `rejected_limits` (`RejectedKeeper`); the
    outcome counts every one. On ClickHouse the whole of it is announced to the
    group commit (`repository.usage_arriving`)."""
    with repository.usage_arriving(session):
        return _ingest(session, body, content_encoding, max_decompressed_bytes, received_us,
                       endpoint, reservation, rejected_limits)  # fmt: skip


def _ingest(
    session: Session,
    body: bytes,
    content_encoding: str | None,
    max_decompressed_bytes: int,
    received_us: int,
    endpoint: str,
    reservation: inflight.Reservation,
    rejected_limits: RejectedLimits,
) -> IngestOutcome:
    try:
        data = decompress(
            body, content_encoding, max_decompressed_bytes, admit=reservation.charge_inflated
        )
        # The common body, every line a valid record: decoded and stored in bulk,
        # its rows built while the database takes the first ones. A record the fast
        # path declines stops it; what it stored is undone and the lines decide.
        bulk = bulk_rows(data, received_us)
        if bulk is not None:
            try:
                return _store(session, bulk, IngestOutcome())
            except NotBulk:
                pass
        # Line by line, records become Python values: dense JSON takes more memory.
        reservation.charge_json_values(data)
        repeated: dict[bytes, tuple[str | None, str]] = {}  # see _REPEATED_LINES
        items = iter_records(data, known=repeated)
    except UndecodableBody as exc:
        repository.add_rejected(
            session,
            [rejected_row(endpoint, received_us, None, None, str(exc), body)],
        )
        telemetry.count_ingest(session, 0, 0, 1)
        return IngestOutcome(rejected=1, undecodable=str(exc))

    outcome = IngestOutcome()
    values: list[tuple[Any, ...]] = []
    rejected = RejectedKeeper(session, endpoint, received_us, rejected_limits)
    for item in items:
        known = repeated.get(item.raw) if repeated and item.raw is not None else None
        if known is not None:
            request_id, reason = known
        else:
            row, found = _validate(item, received_us)
            if row is not None:
                values.append(row)
                continue
            request_id = _request_id_of(item.value)
            reason = found or "invalid record"
            raw = item.raw
            if raw is not None and _room_for(raw, repeated):
                repeated[raw] = (request_id, reason)
        # Only a sample is kept (its row holds the bytes); the rest only counted.
        rejected.add(item.index, request_id, reason, item.verbatim)
        if len(outcome.errors) < MAX_REPORTED_ERRORS:
            outcome.errors.append({"index": item.index, "request_id": request_id, "error": reason})
    rejected.finish()
    outcome.rejected = rejected.count
    return _store(session, values, outcome)


# A rejected NDJSON line seen again in the same body is rejected for the same reason
# without being validated again: what a line means depends only on its bytes and
# the body's received time. A flood of one bad line (a million `{}`) then costs a
# dictionary lookup per line instead of a validation; the memory is bounded by
# these two (lines of at most _REPEATED_LINE_BYTES, at most _REPEATED_LINES).
_REPEATED_LINES = 1024
_REPEATED_LINE_BYTES = 1024


def _room_for(raw: bytes, repeated: dict[bytes, Any]) -> bool:
    """Whether a rejected line is remembered: a short one, while there is room."""
    return len(raw) <= _REPEATED_LINE_BYTES and len(repeated) < _REPEATED_LINES


def _store(
    session: Session, values: Iterable[tuple[Any, ...]], outcome: IngestOutcome
) -> IngestOutcome:
    """Store the first of each request_id in the body (a repeat within it is a
    duplicate, as is one already stored) and count what happened."""
    seen: set[str] = set()
    repeats = 0

    def first_of_each() -> Iterator[tuple[Any, ...]]:
        nonlocal repeats
        for v in values:
            if v[0] in seen:
                repeats += 1
            else:
                seen.add(v[0])
                yield v

    outcome.accepted = repository.insert_usage_values(session, first_of_each())
    outcome.duplicates = len(seen) + repeats - outcome.accepted
    telemetry.count_ingest(session, outcome.accepted, outcome.duplicates, outcome.rejected)
    return outcome


def _validate(item: BodyItem, received_us: int) -> tuple[tuple[Any, ...] | None, str | None]:
    """The row to store (as `repository.usage_row_values` gives it), or why not."""
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
        row = record_values(record, received_us)
        if row is not None:
            return row, None
    if not isinstance(item.value, dict):
        return None, "a record must be a JSON object"
    try:
        validated = UsageRecordIn.model_validate(item.value, context=received_context(received_us))
    except ValidationError as exc:
        return None, format_validation_error(exc)
    return repository.usage_row_values(to_row(validated, received_us)), None


_REQUEST_ID = TEXT_FIELDS_BY_NAME["request_id"]


def _request_id_of(value: Any) -> str | None:
    """The `request_id` a rejected record names, when it is one the store could
    hold (within the column's limits, no NUL): shown beside its error."""
    if isinstance(value, dict):
        request_id = value.get("request_id")
        if (
            isinstance(request_id, str)
            and _REQUEST_ID.min_length <= len(request_id) <= _REQUEST_ID.max_length
            and "\x00" not in request_id
        ):
            return request_id
    return None
