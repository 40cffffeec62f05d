"""Every query the service runs. Callers pass a session; nothing here commits."""

from collections.abc import Sequence
from typing import Any, cast

import orjson
from sqlalchemy import Table, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from service.models import ApiToken, ChangeEvent, RejectedRecord, UsageRecord

USAGE_TABLE = cast(Table, UsageRecord.__table__)
EVENTS_TABLE = cast(Table, ChangeEvent.__table__)
REJECTED_TABLE = cast(Table, RejectedRecord.__table__)
USAGE_COLUMNS = [c.name for c in USAGE_TABLE.columns if c.name != "id"]
_JSON_COLUMNS = {"segments", "attributes"}


def insert_usage_rows(session: Session, rows: Sequence[dict[str, Any]]) -> int:
    """Insert rows in order, skipping any whose request_id is already stored (also by a
    concurrent writer). Returns how many were inserted."""
    if not rows:
        return 0
    if session.get_bind().dialect.name == "postgresql":
        return _copy_usage_rows_postgresql(session, rows)
    stmt = sqlite_insert(USAGE_TABLE).on_conflict_do_nothing(index_elements=["request_id"])
    # sqlite3's executemany rowcount is the sum over the rows: conflicts count 0.
    return session.connection().execute(stmt, list(rows)).rowcount


def _copy_usage_rows_postgresql(session: Session, rows: Sequence[dict[str, Any]]) -> int:
    """COPY into a per-transaction staging table, then one INSERT .. SELECT .. ON
    CONFLICT DO NOTHING: about 4x faster than multi-row INSERT, and its rowcount is
    exact (psycopg reports none for batched inserts)."""
    driver = session.connection().connection.driver_connection
    assert driver is not None
    columns = ", ".join(USAGE_COLUMNS)
    with driver.cursor() as cursor:
        cursor.execute(
            "CREATE TEMP TABLE IF NOT EXISTS usage_stage ON COMMIT DELETE ROWS AS "
            f"SELECT 0::bigint AS ord, {columns} FROM usage_records WITH NO DATA"
        )
        cursor.execute("TRUNCATE usage_stage")
        with cursor.copy(f"COPY usage_stage (ord, {columns}) FROM STDIN") as copy:
            for ord_, row in enumerate(rows):
                copy.write_row((ord_, *(_copy_value(name, row[name]) for name in USAGE_COLUMNS)))
        cursor.execute(
            f"INSERT INTO usage_records ({columns}) SELECT {columns} FROM usage_stage "
            "ORDER BY ord ON CONFLICT (request_id) DO NOTHING"
        )
        return cursor.rowcount


def _copy_value(name: str, value: Any) -> Any:
    if name in _JSON_COLUMNS and value is not None:
        return orjson.dumps(value).decode()
    return value


def add_rejected(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    if rows:
        session.execute(REJECTED_TABLE.insert(), list(rows))


def list_rejected(session: Session, limit: int, before_id: int | None) -> Sequence[RejectedRecord]:
    query = select(RejectedRecord).order_by(RejectedRecord.id.desc()).limit(limit)
    if before_id is not None:
        query = query.where(RejectedRecord.id < before_id)
    return session.scalars(query).all()


def insert_event(session: Session, row: dict[str, Any]) -> tuple[ChangeEvent, bool]:
    """Store an event unless one with the same dedupe_key exists; (event, created)."""
    dialect = session.get_bind().dialect.name
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    stmt = insert(EVENTS_TABLE).values(**row).on_conflict_do_nothing(index_elements=["dedupe_key"])
    created = bool(session.connection().execute(stmt).rowcount)
    event = session.scalars(
        select(ChangeEvent).where(ChangeEvent.dedupe_key == row["dedupe_key"])
    ).one()
    return event, created


def list_events(
    session: Session,
    *,
    service: str | None,
    model: str | None,
    kind: str | None,
    from_us: int | None,
    to_us: int | None,
    limit: int,
) -> Sequence[ChangeEvent]:
    query = select(ChangeEvent)
    if service is not None:
        query = query.where(ChangeEvent.service == service)
    if model is not None:
        query = query.where(ChangeEvent.model == model)
    if kind is not None:
        query = query.where(ChangeEvent.kind == kind)
    if from_us is not None:
        query = query.where(ChangeEvent.ts_us >= from_us)
    if to_us is not None:
        query = query.where(ChangeEvent.ts_us < to_us)
    query = query.order_by(ChangeEvent.ts_us.desc(), ChangeEvent.id.desc()).limit(limit)
    return session.scalars(query).all()


def add_token(session: Session, token: ApiToken) -> None:
    session.add(token)
    session.flush()


def find_token(session: Session, token_hash: str) -> ApiToken | None:
    return session.scalars(
        select(ApiToken).where(ApiToken.token_hash == token_hash, ApiToken.revoked.is_(False))
    ).one_or_none()
