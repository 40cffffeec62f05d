"""Writes and reads of raw usage records and rejected records. Callers pass a session;
nothing here commits."""

import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from itertools import chain
from typing import Any, cast

import polars as pl
import psycopg
from sqlalchemy import Table, func, select, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from service.clickhouse import clickhouse_of, group_commit_of, ids_of
from service.clickhouse import records as ch_records
from service.clickhouse.client import ClickHouse
from service.clickhouse.group_commit import GroupCommit
from service.models import RejectedRecord
from service.repository.locks import (
    CLICKHOUSE_INSERT_LOCK_KEY,
    HOLD_INGEST_LOCK,
    take_pass_lock,
)
from service.repository.sqlite_insert import plan_inserts

# The row is described in `service.usage_row` (both ingest paths build it there);
# re-exported here, where the repository's callers have always found them.
from service.usage_row import USAGE_COLUMNS as USAGE_COLUMNS
from service.usage_row import USAGE_TABLE as USAGE_TABLE
from service.usage_row import usage_row_values as usage_row_values

REJECTED_TABLE = cast(Table, RejectedRecord.__table__)


def insert_usage_values(session: Session, values: Iterable[tuple[Any, ...]]) -> int:
    """Insert rows in `usage_row_values` form (USAGE_COLUMNS order, JSON as text) with
    distinct request_ids, in order, skipping any whose request_id is already stored
    (also by a concurrent writer). Returns how many were inserted. `values` may be
    lazy: an exception it raises leaves none of its rows stored, and propagates."""
    if (ch := clickhouse_of(session)) is not None:
        return _insert_clickhouse(session, ch, values)
    rows = iter(values)
    first = next(rows, None)
    if first is None:
        return 0
    if session.get_bind().dialect.name == "postgresql":
        return _insert_postgresql(session, chain((first,), rows))
    return _insert_sqlite(session, [first, *rows])


@contextmanager
def usage_arriving(session: Session) -> Iterator[None]:
    """Around an ingest request's work before its insert: where inserts are grouped
    (`_group_of`), a concurrent request's insert waits for it briefly, to take its
    rows too (service.clickhouse.group_commit)."""
    group = _group_of(session)
    if group is None:
        yield
        return
    with group.arriving():
        yield


def _group_of(session: Session) -> GroupCommit | None:
    """The group commit of a ClickHouse deployment whose relational database is
    PostgreSQL. On SQLite the insert lock is the write lock, which a request may
    hold already (its rejected records), so requests insert one at a time there:
    none may wait for a leader while holding it."""
    ch = clickhouse_of(session)
    if ch is None or session.get_bind().dialect.name != "postgresql":
        return None
    return group_commit_of(ch)


def _insert_clickhouse(session: Session, ch: ClickHouse, values: Iterable[tuple[Any, ...]]) -> int:
    """Under the insert lock that orders inserts (service.clickhouse.records,
    "Duplicates"). On PostgreSQL, through the process's group commit: the batches
    of concurrent requests go in as one insert, the lock taken by the leading
    request's session, and each request holds the ingest lock shared until its
    transaction ends, after its insert (the pass waits for it before reading the
    highest id). A caller that builds the rows concurrently with others announces
    it (`usage_arriving`, as `ingest_usage` does), so that a leader waits for them."""
    ids = ids_of(session)
    ids.ready()  # its claim is a transaction of its own: before this one's locks
    group = _group_of(session)
    batch = ch_records.usage_batch(values)  # built before the locks: it needs none
    if batch is None:
        return 0
    if group is None:
        take_pass_lock(session, CLICKHOUSE_INSERT_LOCK_KEY)  # SQLite: its write lock
        return ch_records.insert_batches(ch, [batch], ids)[0]
    session.execute(text(HOLD_INGEST_LOCK))

    def lead(batches: Sequence[pl.DataFrame]) -> list[int]:
        take_pass_lock(session, CLICKHOUSE_INSERT_LOCK_KEY)
        return ch_records.insert_batches(ch, batches, ids)

    return group.submit(batch, lead)


def _insert_sqlite(session: Session, values: Sequence[tuple[Any, ...]]) -> int:
    """Through the DBAPI, not SQLAlchemy Core: its per-row bind processing (stdlib
    json even for a None JSON value) cost as much as SQLite's own work. The
    statements are planned by `sqlite_insert` (multi-row, absent columns left out)."""
    connection = session.connection()
    driver = connection.connection.driver_connection
    assert isinstance(driver, sqlite3.Connection)
    max_variables = driver.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    plan = plan_inserts("usage_records", USAGE_COLUMNS, "request_id", values, max_variables)
    return sum(connection.exec_driver_sql(i.statement, i.parameters).rowcount for i in plan)


_COLUMNS = ", ".join(USAGE_COLUMNS)
_COPY_USAGE = f"COPY usage_records ({_COLUMNS}) FROM STDIN"


def _insert_postgresql(session: Session, rows: Iterator[tuple[Any, ...]]) -> int:
    """COPY straight into usage_records the rows whose request_id is not stored yet:
    as fast as a bare COPY. The first attempt COPYs the whole batch without looking
    anything up, so a new batch (the common case) costs no lookup. A stored
    request_id makes it fail with a unique violation; it is rolled back to its
    savepoint and each retry COPYs only the rows an indexed lookup does not find. A
    concurrent writer can hold some of them uncommitted; the COPY then waits for it
    and fails (unique violation once it commits, or a deadlock when each waits for
    the other), is rolled back, which frees the other writer, and is made again: the
    lookup now sees what that writer committed. Retries insert in request_id order
    (ids still follow the body), so writers that all retry cannot deadlock. The
    staging path is the last resort."""
    driver = session.connection().connection.driver_connection
    assert driver is not None
    # The first attempt COPYs rows as `rows` gives them (PostgreSQL inserts the first
    # while the later ones are decoded and built) and keeps them for the retries.
    copied: list[tuple[Any, ...]] = []

    def keeping() -> Iterator[tuple[Any, ...]]:
        for row in rows:
            copied.append(row)
            yield row

    try:
        with driver.cursor() as cursor:
            # One round trip for the transaction's BEGIN (unless rejected records
            # began it), the lock that orders ingest and analytics, and the savepoint
            # a failed attempt rolls back to (it stays valid after a rollback to it).
            # It is never released: commit does that at no cost, a RELEASE would be
            # one more round trip.
            with driver.pipeline():
                cursor.execute(HOLD_INGEST_LOCK)
                cursor.execute("SAVEPOINT usage_copy")
            inserted = _attempt(cursor, lambda: _copy_rows(cursor, keeping()))
            if inserted is not None:
                return inserted
            copied.extend(rows)  # the failed COPY may not have asked for every row
            for _ in range(_COPY_ATTEMPTS - 1):
                inserted = _copy_unstored_rows(cursor, copied)
                if inserted is not None:
                    return inserted
            return _insert_via_staging(cursor, copied)
    except psycopg.OperationalError as exc:
        # Raised by the driver itself: wrapped as SQLAlchemy's would be, so that the
        # API answers 503 with Retry-After (a deadlock, the server going away).
        raise OperationalError("COPY usage_records", None, exc) from exc


_COPY_ATTEMPTS = 5  # of each path: the COPYs, then the staging insert


def _attempt(cursor: psycopg.Cursor[Any], copy: Callable[[], int]) -> int | None:
    """One COPY under the savepoint `usage_copy`: how many rows went in, or None
    (rolled back) when stored or concurrently written rows got in the way. An
    exception from the rows themselves (a record the bulk path declines) also rolls
    it back, and propagates; a database error leaves the transaction to the caller."""
    try:
        return copy()
    except (psycopg.errors.UniqueViolation, psycopg.errors.DeadlockDetected):
        cursor.execute("ROLLBACK TO SAVEPOINT usage_copy")
        return None
    except psycopg.Error:
        raise
    except Exception:
        cursor.execute("ROLLBACK TO SAVEPOINT usage_copy")
        raise


def _copy_rows(cursor: psycopg.Cursor[Any], rows: Iterable[tuple[Any, ...]]) -> int:
    written = 0
    with cursor.copy(_COPY_USAGE) as copy:
        for row in rows:
            copy.write_row(row)
            written += 1
    return written


def _copy_unstored_rows(cursor: psycopg.Cursor[Any], values: list[tuple[Any, ...]]) -> int | None:
    """A retry: the rows an indexed `= ANY` lookup does not find, with ids taken in
    body order, COPYed in request_id order."""
    cursor.execute(
        "SELECT request_id FROM usage_records WHERE request_id = ANY(%s)",
        ([v[0] for v in values],),
    )
    stored = {request_id for (request_id,) in cursor.fetchall()}
    new = [v for v in values if v[0] not in stored]
    if not new:
        return 0

    def copy_in_request_id_order() -> int:
        cursor.execute(_NEXT_IDS, (len(new),))
        ids = [next_id for (next_id,) in cursor.fetchall()]
        ordered = sorted(zip(ids, new, strict=True), key=lambda pair: pair[1][0])
        with cursor.copy(_COPY_USAGE_WITH_IDS) as copy:
            for next_id, row in ordered:
                copy.write_row((next_id, *row))
        return len(ordered)

    return _attempt(cursor, copy_in_request_id_order)


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


def count_rejected_since(session: Session, since_us: int) -> int:
    """How many rejected rows were received at or after `since_us` (the index on
    `received_us` answers it): what the current minute has kept so far."""
    query = select(func.count()).select_from(REJECTED_TABLE)
    return session.scalar(query.where(REJECTED_TABLE.c.received_us >= since_us)) or 0


def list_rejected(session: Session, limit: int, before_id: int | None) -> Sequence[RejectedRecord]:
    query = select(RejectedRecord).order_by(RejectedRecord.id.desc()).limit(limit)
    if before_id is not None:
        query = query.where(RejectedRecord.id < before_id)
    return session.scalars(query).all()
