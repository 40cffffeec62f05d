"""The rejected store (contract section 2): input that was not stored, kept verbatim
with its reason for `GET /v1/rejected`, so nothing is dropped silently."""

import base64
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from service import repository
from service.models import RejectedRecord
from service.repository.usage import count_rejected_since
from service.rfc3339 import us_to_rfc3339
from service.settings import Settings
from service.timeunits import MINUTE_US as _MINUTE_US

#: A reason is cut to this many characters (a validation error can quote its input).
MAX_REASON_CHARS = 2000


@dataclass(frozen=True)
class RejectedLimits:
    """What is kept of one body's rejected records (the settings of the same names,
    docs/ingestion.md "What is kept of rejected records")."""

    sample_per_reason: int
    reasons_per_body: int
    rows_per_minute: int

    @classmethod
    def of(cls, settings: Settings) -> "RejectedLimits":
        return cls(
            sample_per_reason=settings.rejected_sample_per_reason,
            reasons_per_body=settings.rejected_reasons_per_body,
            rows_per_minute=settings.rejected_rows_per_minute,
        )


#: The settings' defaults, for callers outside a request (the simulator, tests).
DEFAULT_LIMITS = RejectedLimits.of(Settings.model_construct())


def rejected_row(
    endpoint: str,
    received_us: int,
    index: int | None,
    request_id: str | None,
    reason: str,
    raw: bytes,
    *,
    cut: bool = True,
) -> dict[str, Any]:
    """One rejected input as the store keeps it: where it came from, its place in
    its batch (None: the whole body, or a row counting records not kept), its
    `request_id` when it had one, why (cut to MAX_REASON_CHARS unless `cut` is
    False: a count's note after a cut reason), and the bytes as sent."""
    return {
        "received_us": received_us,
        "endpoint": endpoint,
        "batch_index": index,
        "request_id": request_id,
        "reason": reason[:MAX_REASON_CHARS] if cut else reason,
        "raw": raw,
    }


class RejectedKeeper:
    """The rejected records of one body, of which a bounded sample is kept: the
    first `sample_per_reason` records of each distinct reason (the exact text), for
    the first `reasons_per_body` reasons, and then one row per such reason saying
    how many more it had ("... [and 999,990 more records with this reason in this
    body were not kept]"), and one for the records of any further reason. `count`
    is every rejected record, whatever was kept.

    Across bodies, the rows kept per minute of `received_us` stop at
    `rows_per_minute`: a body that finds the minute's budget spent keeps one row
    instead, counting its rejected records and naming its reasons. Concurrent
    bodies read the budget before either writes, so a minute can go over it by at
    most what those bodies keep.

    Nothing is written before `finish`: the samples are held (a subset of the
    body), so on SQLite the write lock is taken once, at the end, for a few rows,
    not from the first rejected record on while the rest of the body is read."""

    def __init__(
        self, session: Session, endpoint: str, received_us: int, limits: RejectedLimits
    ) -> None:
        self.session = session
        self.endpoint = endpoint
        self.received_us = received_us
        self.limits = limits
        self.count = 0
        self._samples: list[dict[str, Any]] = []
        self._kept: dict[str, int] = {}  # reason -> samples taken
        self._more: dict[str, int] = {}  # reason -> records not sampled
        self._other = 0  # records of reasons beyond `reasons_per_body`

    def add(
        self, index: int | None, request_id: str | None, reason: str, raw: Callable[[], bytes]
    ) -> None:
        """One rejected record; `raw()` gives its bytes, asked only when it is kept."""
        self.count += 1
        reason = reason[:MAX_REASON_CHARS]
        taken = self._kept.get(reason)
        if taken is None:
            if len(self._kept) >= self.limits.reasons_per_body:
                self._other += 1
                return
            taken = 0
        if taken >= self.limits.sample_per_reason:
            self._more[reason] = self._more.get(reason, 0) + 1
            return
        self._kept[reason] = taken + 1
        self._samples.append(
            rejected_row(self.endpoint, self.received_us, index, request_id, reason, raw())
        )

    def finish(self) -> None:
        """Write what is kept, in the request's transaction: the samples the
        minute's budget allows, in body order, then the rows counting the rest."""
        if not self.count:
            return
        minute = self.received_us // _MINUTE_US * _MINUTE_US
        budget = self.limits.rows_per_minute - count_rejected_since(self.session, minute)
        samples, dropped = self._samples[: max(budget, 0)], self._samples[max(budget, 0) :]
        for row in dropped:
            self._more[row["reason"]] = self._more.get(row["reason"], 0) + 1
        counts = self._count_rows()
        if len(samples) + len(counts) > budget and (dropped or counts):
            counts = [self._one_count_row()]  # the minute's budget is spent
        repository.add_rejected(self.session, samples + counts)  # bounded by the limits

    def _count_rows(self) -> list[dict[str, Any]]:
        note = "more records with this reason in this body were not kept"
        rows = [
            self._note(f"{reason} [and {more:,} {note}]") for reason, more in self._more.items()
        ]
        if self._other:
            rows.append(
                self._note(
                    f"[{self._other:,} more records of this body, with reasons other than "
                    f"its first {self.limits.reasons_per_body:,} distinct ones, were not kept]"
                )
            )
        return rows

    def _one_count_row(self) -> dict[str, Any]:
        """The one row of a body past the minute's budget: how many of its rejected
        records were not kept, and its reasons, most frequent first."""
        not_kept = sum(self._more.values()) + self._other
        reasons = sorted(self._more.items(), key=lambda item: -item[1])
        named = "; ".join(f"{more:,}x {reason}" for reason, more in reasons)
        return self._note(
            f"[{not_kept:,} rejected records of this body were not kept: the limit of "
            f"{self.limits.rows_per_minute:,} kept rejected rows a minute was reached] "
            f"{named}"[:MAX_REASON_CHARS]
        )

    def _note(self, reason: str) -> dict[str, Any]:
        """A row that counts records instead of keeping them: no index, no bytes."""
        return rejected_row(self.endpoint, self.received_us, None, None, reason, b"", cut=False)


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
