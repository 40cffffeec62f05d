"""The rejected store (contract section 2): input that was not stored, kept verbatim
with its reason for `GET /v1/rejected`, so nothing is dropped silently."""

import base64
from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from service import repository
from service.models import RejectedRecord
from service.rfc3339 import us_to_rfc3339

#: A reason is cut to this many characters (a validation error can quote its input).
MAX_REASON_CHARS = 2000


def rejected_row(
    endpoint: str,
    received_us: int,
    index: int | None,
    request_id: str | None,
    reason: str,
    raw: bytes,
) -> dict[str, Any]:
    """One rejected input as the store keeps it: where it came from, its place in
    its batch (None: the whole body), its `request_id` when it had one, why, and the
    bytes as sent."""
    return {
        "received_us": received_us,
        "endpoint": endpoint,
        "batch_index": index,
        "request_id": request_id,
        "reason": reason[:MAX_REASON_CHARS],
        "raw": raw,
    }


def keep_rejected_body(
    session: Session, endpoint: str, body: bytes, reason: str, received_us: int
) -> None:
    """Keep a whole body that was refused (not JSON, too many items, invalid) as it
    was sent, in the request's transaction: it is stored with the answer's commit."""
    repository.add_rejected(
        session, [rejected_row(endpoint, received_us, None, None, reason, body)]
    )


def list_rejected(session: Session, limit: int, before_id: int | None) -> Sequence[RejectedRecord]:
    """At most `limit` rejected inputs, newest first; with `before_id`, those stored
    before it (the next page)."""
    return repository.list_rejected(session, limit, before_id)


def rejected_to_json(row: RejectedRecord) -> dict[str, Any]:
    """A rejected input as `GET /v1/rejected` shows it: the raw bytes as UTF-8 text,
    or base64 when they are not text (a broken gzip body), which `raw_encoding` says."""
    try:
        raw, encoding = row.raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        raw, encoding = base64.b64encode(row.raw).decode("ascii"), "base64"
    return {
        "id": row.id,
        "received_at": us_to_rfc3339(row.received_us),
        "endpoint": row.endpoint,
        "index": row.batch_index,
        "request_id": row.request_id,
        "reason": row.reason,
        "raw": raw,
        "raw_encoding": encoding,
    }
