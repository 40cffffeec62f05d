"""Advisory locks that order ingestion, analytics and their watermark on PostgreSQL
(SQLite transactions are serialized already)."""

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import text
from sqlalchemy.orm import Session

INGEST_LOCK_KEY = 0x63_77_69_6E  # "cwin"
ANALYTICS_LOCK_KEY = 0x63_77_61_6E  # "cwan"


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
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": ANALYTICS_LOCK_KEY})
