"""Advisory locks that order ingestion, analytics and their watermark on PostgreSQL
(SQLite transactions are serialized already)."""

from sqlalchemy import text
from sqlalchemy.orm import Session

INGEST_LOCK_KEY = 0x63_77_69_6E  # "cwin"
ANALYTICS_LOCK_KEY = 0x63_77_61_6E  # "cwan"


def hold_ingest_lock(session: Session) -> None:
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock_shared(:k)"), {"k": INGEST_LOCK_KEY})


def wait_for_ingest(session: Session) -> None:
    """Waits out every ingest transaction in flight (they hold the lock shared)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": INGEST_LOCK_KEY})


def take_analytics_lock(session: Session) -> None:
    """One analytics pass at a time (SQLite transactions are already serialized)."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": ANALYTICS_LOCK_KEY})
