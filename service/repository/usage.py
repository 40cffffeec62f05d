"""Writes and reads of raw usage records and rejected records. Callers pass a session;
nothing here commits."""

from collections.abc import Callable, Sequence
from functools import lru_cache
from operator import itemgetter
from typing import Any, cast

import orjson
import psycopg
from sqlalchemy import Table, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from service.models import (
    RejectedRecord,
    UsageRecord,
)
from service.repository.locks import hold_ingest_lock

USAGE_TABLE = cast(Table, UsageRecord.__table__)
REJECTED_TABLE = cast(Table, RejectedRecord.__table__)
USAGE_COLUMNS = [c.name for c in USAGE_TABLE.columns if c.name != "id"]
_JSON_COLUMNS = {"segments", "attributes"}


def insert_usage_values(session: Session, values: Sequence[tuple[Any, ...]]) -> int:
    """Insert rows in `usage_row_values` form (USAGE_COLUMNS order, JSON as text) with
    distinct request_ids, in order, skipping any whose request_id is already stored
    (also by a concurrent writer). Returns how many were inserted."""
    if not values:
        return 0
    if session.get_bind().dialect.name == "postgresql":
        hold_ingest_lock(session)
        return _insert_postgresql(session, values)
    return _insert_sqlite(session, values)


def _insert_sqlite(session: Session, values: Sequence[tuple[Any, ...]]) -> int:
    """Plain DBAPI executemany over ready tuples: SQLAlchemy's per-row bind
    processing (stdlib json even for a None JSON value) cost as much as SQLite's own
    work. Each run of consecutive rows with the same absent (None) fields goes in
    with a statement that leaves those columns out, so they default to NULL without
    being bound: pysqlite binds None through its adapter protocol (a key built and a
    registry lookup per value), which for the eight or so empty optional fields of a
    typical record cost more than binding all the others. Log shippers send bodies
    of one shape, so a body is one run or a few; runs keep body order, so ids do.
    sqlite3's executemany rowcount is the sum over the rows: conflicts count 0."""
    connection = session.connection()
    inserted = 0
    for absent, run in _runs_by_absent_columns(values):
        statement, pick = _sqlite_insert_of(absent)
        inserted += connection.exec_driver_sql(statement, list(map(pick, run))).rowcount
    return inserted


def _runs_by_absent_columns(
    values: Sequence[tuple[Any, ...]],
) -> list[tuple[tuple[int, ...], list[tuple[Any, ...]]]]:
    """Consecutive rows grouped by the positions of their None values. A row joins
    the current run when it holds as many Nones as the run's rows and all of them at
    the run's positions: two C-level checks (`count`, an itemgetter compared with a
    tuple of Nones) instead of testing each of its 22 values in Python."""
    runs: list[tuple[tuple[int, ...], list[tuple[Any, ...]]]] = []
    current: list[tuple[Any, ...]] = []
    nones = -1
    absent_of: Callable[[tuple[Any, ...]], Any] = _nothing
    expected: Any = None
    for row in values:
        if row.count(None) != nones or absent_of(row) != expected:
            absent = tuple(i for i, value in enumerate(row) if value is None)
            nones = len(absent)
            absent_of = itemgetter(*absent) if absent else _nothing
            expected = absent_of(_ALL_NONE)
            current = []
            runs.append((absent, current))
        current.append(row)
    return runs


def _nothing(_row: tuple[Any, ...]) -> None:
    return None


@lru_cache(maxsize=256)
def _sqlite_insert_of(absent: tuple[int, ...]) -> tuple[str, Callable[[Any], Any]]:
    """The INSERT naming only the present columns, and what picks their values (the
    required columns are always present, so the getter always returns a tuple)."""
    positions = [i for i in range(len(USAGE_COLUMNS)) if i not in absent]
    columns = ", ".join(USAGE_COLUMNS[i] for i in positions)
    statement = (
        f"INSERT INTO usage_records ({columns}) VALUES ({', '.join('?' * len(positions))}) "
        "ON CONFLICT (request_id) DO NOTHING"
    )
    return statement, itemgetter(*positions)


# Every column with its value bound: the bench's context line (raw sqlite3) uses it.
SQLITE_INSERT_USAGE = (
    f"INSERT INTO usage_records ({', '.join(USAGE_COLUMNS)}) "
    f"VALUES ({', '.join('?' * len(USAGE_COLUMNS))}) ON CONFLICT (request_id) DO NOTHING"
)
_ALL_NONE = (None,) * len(USAGE_COLUMNS)
_USAGE_VALUES = itemgetter(*USAGE_COLUMNS)
_JSON_POSITIONS = [i for i, name in enumerate(USAGE_COLUMNS) if name in _JSON_COLUMNS]


def usage_row_values(row: dict[str, Any]) -> tuple[Any, ...]:
    """The row in USAGE_COLUMNS order, JSON columns as JSON text and None as SQL
    NULL: what both the SQLite executemany and the PostgreSQL COPY take."""
    values: tuple[Any, ...] = _USAGE_VALUES(row)
    for i in _JSON_POSITIONS:  # a loop, not all(genexpr): 5x cheaper, once per row
        if values[i] is not None:
            break
    else:
        return values
    patched = list(values)
    for i in _JSON_POSITIONS:
        if patched[i] is not None:
            patched[i] = orjson.dumps(patched[i]).decode()
    return tuple(patched)


_COLUMNS = ", ".join(USAGE_COLUMNS)
_COPY_USAGE = f"COPY usage_records ({_COLUMNS}) FROM STDIN"


def _insert_postgresql(session: Session, values: Sequence[tuple[Any, ...]]) -> int:
    """COPY straight into usage_records the rows whose request_id is not stored yet:
    as fast as a bare COPY. A concurrent writer can hold some of them uncommitted;
    the COPY then waits for it and fails (unique violation once it commits, or a
    deadlock when each waits for the other), is rolled back to its savepoint, which
    frees the other writer, and is made again: the lookup now sees what that writer
    committed. Retries insert in request_id order (ids still follow the body), so
    writers that all retry cannot deadlock. The staging path is the last resort."""
    driver = session.connection().connection.driver_connection
    assert driver is not None
    try:
        with driver.cursor() as cursor:
            for attempt in range(_COPY_ATTEMPTS):
                inserted = _copy_new_rows(cursor, values, by_request_id=attempt > 0)
                if inserted is not None:
                    return inserted
            return _insert_via_staging(cursor, values)
    except psycopg.OperationalError as exc:
        # Raised by the driver itself: wrapped as SQLAlchemy's would be, so that the
        # API answers 503 with Retry-After (a deadlock, the server going away).
        raise OperationalError("COPY usage_records", None, exc) from exc


_COPY_ATTEMPTS = 5


def _copy_new_rows(
    cursor: psycopg.Cursor[Any], values: Sequence[tuple[Any, ...]], *, by_request_id: bool
) -> int | None:
    """One attempt: the rows not stored (one indexed `= ANY` lookup) COPYed in, under
    a savepoint. How many, or None when a concurrent writer's rows got in the way."""
    cursor.execute(
        "SELECT request_id FROM usage_records WHERE request_id = ANY(%s)",
        ([v[0] for v in values],),
    )
    stored = {request_id for (request_id,) in cursor.fetchall()}
    new = [v for v in values if v[0] not in stored] if stored else values
    if not new:
        return 0
    cursor.execute("SAVEPOINT usage_copy")
    try:
        if by_request_id:
            cursor.execute(_NEXT_IDS, (len(new),))
            ids = [next_id for (next_id,) in cursor.fetchall()]
            ordered = sorted(zip(ids, new, strict=True), key=lambda pair: pair[1][0])
            with cursor.copy(_COPY_USAGE_WITH_IDS) as copy:
                for next_id, row in ordered:
                    copy.write_row((next_id, *row))
        else:
            with cursor.copy(_COPY_USAGE) as copy:
                for row in new:
                    copy.write_row(row)
    except (psycopg.errors.UniqueViolation, psycopg.errors.DeadlockDetected):
        cursor.execute("ROLLBACK TO SAVEPOINT usage_copy")
        return None
    cursor.execute("RELEASE SAVEPOINT usage_copy")
    return len(new)


_COPY_USAGE_WITH_IDS = f"COPY usage_records (id, {_COLUMNS}) FROM STDIN"
# Ids in body order (each session's nextval values increase), taken before the rows
# are inserted in another order.
_NEXT_IDS = (
    "SELECT nextval(pg_get_serial_sequence('usage_records', 'id')) "
    "FROM generate_series(1, %s) ORDER BY 1"
)


def _insert_via_staging(cursor: psycopg.Cursor[Any], values: Sequence[tuple[Any, ...]]) -> int:
    """COPY into a per-transaction staging table, then one INSERT .. SELECT .. ON
    CONFLICT DO NOTHING: its rowcount is exact (psycopg reports none for batched
    inserts), and it waits for, then skips, rows a concurrent writer holds. Ids are
    taken in body order but rows go in by request_id, the order every writer locks
    in, so two staging inserts cannot deadlock; a deadlock with a first COPY attempt
    is rolled back to a savepoint and tried again."""
    cursor.execute(
        "CREATE TEMP TABLE IF NOT EXISTS usage_stage_v2 ON COMMIT DELETE ROWS AS "
        f"SELECT 0::bigint AS id, {_COLUMNS} FROM usage_records WITH NO DATA"
    )
    for attempt in range(_COPY_ATTEMPTS):
        cursor.execute("SAVEPOINT usage_stage")
        try:
            cursor.execute("TRUNCATE usage_stage_v2")
            cursor.execute(_NEXT_IDS, (len(values),))
            ids = [next_id for (next_id,) in cursor.fetchall()]
            with cursor.copy(f"COPY usage_stage_v2 (id, {_COLUMNS}) FROM STDIN") as copy:
                for next_id, row in zip(ids, values, strict=True):
                    copy.write_row((next_id, *row))
            cursor.execute(
                f"INSERT INTO usage_records (id, {_COLUMNS}) SELECT id, {_COLUMNS} "
                "FROM usage_stage_v2 ORDER BY request_id ON CONFLICT (request_id) DO NOTHING"
            )
        except psycopg.errors.DeadlockDetected:
            cursor.execute("ROLLBACK TO SAVEPOINT usage_stage")
            if attempt == _COPY_ATTEMPTS - 1:
                raise
            continue
        inserted = cursor.rowcount
        cursor.execute("RELEASE SAVEPOINT usage_stage")
        return inserted
    raise AssertionError("unreachable")


def add_rejected(session: Session, rows: Sequence[dict[str, Any]]) -> None:
    if rows:
        session.execute(REJECTED_TABLE.insert(), list(rows))


def list_rejected(session: Session, limit: int, before_id: int | None) -> Sequence[RejectedRecord]:
    query = select(RejectedRecord).order_by(RejectedRecord.id.desc()).limit(limit)
    if before_id is not None:
        query = query.where(RejectedRecord.id < before_id)
    return session.scalars(query).all()
