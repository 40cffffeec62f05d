"""Advisory locks that order ingestion, analytics and their watermark on PostgreSQL
(SQLite transactions are serialized already)."""

import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import text
from sqlalchemy.orm import Session

from service.db import PassBusy, lock_deadline

INGEST_LOCK_KEY = 0x63_77_69_6E  # "cwin"
ANALYTICS_LOCK_KEY = 0x63_77_61_6E  # "cwan"
#: Held by a ClickHouse deployment's ingest transaction from its duplicate check to
#: its insert's answer: two batches with one request_id are then told apart exactly
#: (service.clickhouse.records, "Duplicates").
CLICKHOUSE_INSERT_LOCK_KEY = 0x63_77_63_68  # "cwch"


# Held shared by every ingest transaction until it ends. Sent by the PostgreSQL insert
# through the driver, in one round trip with the transaction's BEGIN and savepoint.
HOLD_INGEST_LOCK = f"SELECT pg_advisory_xact_lock_shared({INGEST_LOCK_KEY})"


def wait_for_ingest(session: Session) -> None:
    """Waits out every ingest transaction in flight (they hold the lock shared)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": INGEST_LOCK_KEY})


@contextmanager
def ingest_quiesced(session: Session) -> Iterator[None]:
    """Like `wait_for_ingest`, but the lock is held only while the body runs (a
    session-level lock, released at once), not until the caller's transaction ends:
    held for a whole analytics pass, it stopped every replica's ingestion for the
    pass. Safe to release after reading the highest id: every insert in flight has
    finished, and later ones take their ids from the sequence, above it."""
    if session.get_bind().dialect.name != "postgresql":
        yield
        return
    session.execute(text("SELECT pg_advisory_lock(:k)"), {"k": INGEST_LOCK_KEY})
    try:
        yield
    except BaseException:
        # The transaction may be aborted, so the unlock could fail; closing the
        # connection releases the lock for sure (never left held in the pool).
        session.connection().invalidate()
        raise
    session.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": INGEST_LOCK_KEY})


def take_analytics_lock(session: Session) -> None:
    """One analytics pass at a time (SQLite transactions are already serialized)."""
    take_pass_lock(session, ANALYTICS_LOCK_KEY)


#: `session.info` key: when a SQLite pass took the write lock (time.monotonic()), so
#: the worker can tell how long a step held it (`service.worker`).
LOCKED_AT = "cachewatch.locked_at"


def take_pass_lock(session: Session, key: int) -> None:
    """The lock of a pass (analytics, detection), held until the transaction ends.

    PostgreSQL: the advisory lock `key`. SQLite: the write lock, which the
    transaction takes at its BEGIN IMMEDIATE (started here if it has not been).
    Either is waited for until the transaction's deadline when its session comes
    from `service.db.waiting_for_locks` (PostgreSQL: pg_try_advisory_xact_lock
    polled, so the wait is bounded like SQLite's busy timeout), then PassBusy;
    otherwise as long as it takes (SQLite: its busy timeout)."""
    conn = session.connection()
    if conn.dialect.name != "postgresql":
        session.info.setdefault(LOCKED_AT, time.monotonic())
        return
    deadline = lock_deadline(conn)
    if deadline is None:
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})
        return
    pause = 0.01
    try_lock = text("SELECT pg_try_advisory_xact_lock(:k)")
    while not session.scalar(try_lock, {"k": key}):
        left = deadline.at - time.monotonic()
        if left <= 0:
            raise PassBusy(deadline.wait_s)
        time.sleep(min(pause, left))
        pause = min(pause * 2, 0.2)
