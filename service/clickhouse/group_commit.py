"""Group commit: the batches that API threads hand to ClickHouse at the same time go
in as one insert.

Why. On Debian's 18.16 an insert's cost is mostly per insert, not per row: 200
inserts of 1,000 records cost its server 6.1 s and 7.6 CPU-seconds, 20 inserts of
the same rows in tens of batches 0.9 s and 0.8 CPU-seconds (a scratch timing: each
insert is a part written, then merged). Ingest over HTTP is many small batches at
once, so while one insert is in flight the next ones wait, and they can wait
together.

Protocol (leader and followers, no thread of its own). A batch is queued; if no
insert is in flight, its thread becomes the leader: it takes what is queued (up to
`max_rows`, in arrival order, at least one batch), writes it through `lead` (which
takes the caller's locks, checks duplicates and inserts: `records.insert_batches`)
and hands each batch its own answer. The others wait; when the leader is done the
first waiter whose batch is still queued leads the next group. So a batch waits
for at most the insert in flight and its own; a lone batch goes in at once, as
before; and the queue's rows are bounded by what the waiting threads hold.

What stays exact. The group is written in arrival order under one duplicate check
(`lead`), so of two batches with one request_id, the earlier is accepted and the
later counts it as a duplicate, as when they went in one after the other. A failed
insert fails every batch of its group with the same error (each answers 503, as a
lone batch did): none of their rows is counted, and a retry finds none stored or
all of them (ClickHouse writes one insert's part whole).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import polars as pl

#: Writes a group of batches, in order, and returns each one's accepted count.
Lead = Callable[[Sequence[pl.DataFrame]], Sequence[int]]


@dataclass(eq=False)
class _Entry:
    batch: pl.DataFrame
    accepted: int | None = None
    error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self.accepted is not None or self.error is not None


@dataclass(eq=False)
class GroupCommit:
    """One per ClickHouse client (`service.clickhouse.group_commit_of`)."""

    max_rows: int = 100_000
    #: How long a leader waits for batches still being built (`arriving`).
    linger_s: float = 0.02
    _queue: list[_Entry] = field(default_factory=list)
    _leading: bool = False
    _arriving: int = 0
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _mine: threading.local = field(default_factory=threading.local)

    @contextmanager
    def arriving(self) -> Iterator[None]:
        """Around the building of a batch this thread will submit: a leader waits
        for it (up to `linger_s`), so it joins the group instead of leading the
        next one (PostgreSQL's commit_delay and commit_siblings, for inserts).
        It stops counting once its batch is queued (`submit`); nested, the
        outermost counts."""
        if getattr(self._mine, "counted", False):
            yield
            return
        with self._changed:
            self._arriving += 1
        self._mine.counted = True
        try:
            yield
        finally:
            self._arrived()

    def _arrived(self) -> None:
        if getattr(self._mine, "counted", False):
            self._mine.counted = False
            with self._changed:
                self._arriving -= 1
                self._changed.notify_all()

    def submit(self, batch: pl.DataFrame, lead: Lead) -> int:
        """`batch`'s accepted count once its group is written; raises its group's
        error. `lead` is this caller's: it runs only if this thread leads."""
        entry = _Entry(batch)
        with self._changed:
            self._queue.append(entry)
        self._arrived()
        while True:
            with self._changed:
                while self._leading and not entry.done:
                    self._changed.wait()
                if entry.done:
                    return _answer(entry)
                self._leading = True
                self._changed.wait_for(lambda: not self._arriving, self.linger_s)
                group = self._take()
            self._write(group, lead)

    def _take(self) -> list[_Entry]:
        """The queue's head: batches in arrival order up to `max_rows` (one at least)."""
        rows, n = 0, 0
        for entry in self._queue:
            if n and rows + entry.batch.height > self.max_rows:
                break
            rows += entry.batch.height
            n += 1
        group, self._queue = self._queue[:n], self._queue[n:]
        return group

    def _write(self, group: list[_Entry], lead: Lead) -> None:
        try:
            answers = lead([e.batch for e in group])
        except BaseException as exc:  # every batch of the group answers with it
            for entry in group:
                entry.error = exc
        else:
            for entry, accepted in zip(group, answers, strict=True):
                entry.accepted = accepted
        finally:
            with self._changed:
                self._leading = False
                self._changed.notify_all()


def _answer(entry: _Entry) -> int:
    if entry.error is not None:
        # A copy per thread: one exception object raised in several threads would
        # collect all their tracebacks (the original where it cannot be copied).
        try:
            error = copy.copy(entry.error)
        except Exception:
            raise entry.error from None
        raise error from entry.error
    assert entry.accepted is not None
    return entry.accepted
