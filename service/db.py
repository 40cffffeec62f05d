"""Engine and session set-up for SQLite (embedded default) and PostgreSQL."""

import sqlite3
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from service.clickhouse import INFO_KEY
from service.clickhouse.client import ClickHouse
from service.settings import Settings


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


#: Execution option of an engine made by `waiting_for_locks`: how long each of its
#: transactions waits for a lock another pass holds.
LOCK_WAIT_S = "cachewatch_lock_wait_s"
_DEADLINE = "cachewatch_lock_deadline"  # Connection.info: the transaction's LockDeadline
#: Execution option of an engine made by `reading_only`: its transactions only read.
READ_ONLY = "cachewatch_read_only"
_QUERY_ONLY = "cachewatch_query_only"  # Connection.info: SQLite's query_only pragma as set


class PassBusy(OperationalError):
    """Another transaction held the lock a pass needs (SQLite's write lock, or the
    pass's PostgreSQL advisory lock) for the whole `waited_s` this one would wait.
    An OperationalError, like the "database is locked" it replaces on SQLite, so
    whatever retries on a busy database (alert delivery) still does."""

    def __init__(self, waited_s: float, orig: BaseException | None = None) -> None:
        super().__init__("waiting for a pass in progress", None, orig or TimeoutError())
        self.waited_s = waited_s

    def __str__(self) -> str:
        return f"another pass held the database lock for the {self.waited_s:g} s waited"

    def __reduce__(self) -> tuple[type["PassBusy"], tuple[float]]:
        return type(self), (self.waited_s,)


@dataclass(frozen=True)
class LockDeadline:
    at: float  # time.monotonic()
    wait_s: float


def lock_deadline(conn: Connection) -> LockDeadline | None:
    """Until when the transaction of `conn` waits for a lock another pass holds
    (`waiting_for_locks`); None: as long as it takes (SQLite: its busy timeout)."""
    deadline = conn.info.get(_DEADLINE)
    return deadline if isinstance(deadline, LockDeadline) else None


def _set_lock_deadline(conn: Connection) -> float | None:
    """At BEGIN: the transaction's deadline from its engine's LOCK_WAIT_S (set on
    every BEGIN: the info dict stays with the pooled DBAPI connection)."""
    wait_s = conn.get_execution_options().get(LOCK_WAIT_S)
    conn.info[_DEADLINE] = (
        None if wait_s is None else LockDeadline(time.monotonic() + wait_s, wait_s)
    )
    return None if wait_s is None else float(wait_s)


def waiting_for_locks(factory: sessionmaker[Session], wait_s: float) -> sessionmaker[Session]:
    """`factory` whose transactions wait at most `wait_s` for a pass in progress: on
    SQLite their BEGIN IMMEDIATE waits that long for the write lock (instead of the
    busy timeout), on PostgreSQL the advisory lock of a pass (`take_pass_lock`) is
    polled until that long after BEGIN; past it, PassBusy. For `cachewatch detect`
    and the background jobs, which may skip a run; requests keep the busy timeout
    (a 503 with Retry-After). The same pool and connections as `factory`'s."""
    bind = factory.kw.get("bind")
    if not isinstance(bind, Engine):  # bound to a connection (tests): left as it is
        return factory
    return sessionmaker(**{**factory.kw, "bind": bind.execution_options(**{LOCK_WAIT_S: wait_s})})


def reading_only(factory: sessionmaker[Session]) -> sessionmaker[Session]:
    """`factory` whose transactions only read: the sessions of the read routes.

    On SQLite every other transaction begins IMMEDIATE (`make_engine`), taking the
    write lock for its whole length: a dashboard's five data requests would queue
    behind each other and behind ingestion, and one that waited past the busy
    timeout answered 503. These begin DEFERRED (a WAL snapshot, no lock) with the
    `query_only` pragma on; on PostgreSQL they are READ ONLY transactions. Either
    way a write in a read route fails loudly instead of taking a lock. The same
    pool and connections as `factory`'s."""
    bind = factory.kw.get("bind")
    if not isinstance(bind, Engine):  # bound to a connection (tests): left as it is
        return factory
    return sessionmaker(**{**factory.kw, "bind": bind.execution_options(**{READ_ONLY: True})})


def _pg_begin(conn: Connection) -> None:
    _set_lock_deadline(conn)
    if conn.get_execution_options().get(READ_ONLY):
        conn.exec_driver_sql("SET TRANSACTION READ ONLY").close()


def _sqlite_query_only(conn: Connection, on: bool) -> None:
    """SQLite's `query_only` pragma for the connection's next transaction, set only
    when it changes (it stays with the pooled DBAPI connection)."""
    if conn.info.get(_QUERY_ONLY, False) is not on:
        conn.exec_driver_sql(f"PRAGMA query_only={int(on)}").close()
        conn.info[_QUERY_ONLY] = on


def make_engine(settings: Settings, *, sqlite_begin: str = "IMMEDIATE", **kwargs: Any) -> Engine:
    """`sqlite_begin`: IMMEDIATE takes SQLite's write lock when a transaction starts,
    so a transaction that reads (the token) and then writes waits for the lock
    (busy_timeout) instead of failing on a stale snapshot; long read-only passes
    use DEFERRED so they never hold it, as do the read routes (`reading_only`)."""
    url = settings.database_url
    if not is_sqlite(url):
        # pre_ping: after a PostgreSQL restart, stale pooled connections are
        # replaced instead of failing the first request of each.
        pg_engine = create_engine(url, pool_pre_ping=True, **kwargs)
        event.listen(pg_engine, "begin", _pg_begin)
        return pg_engine
    _bind_none_and_bytes_directly()
    engine = create_engine(url, connect_args={"timeout": 30}, **kwargs)
    busy_ms = settings.sqlite_busy_timeout_ms

    @event.listens_for(engine, "connect")
    def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
        cursor = dbapi_conn.cursor()
        # WAL lets the dashboard read while a batch is written; synchronous=FULL
        # fsyncs the WAL at each commit so an acknowledged batch survives power loss.
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=FULL")
        cursor.execute(f"PRAGMA busy_timeout={int(busy_ms)}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA temp_store=MEMORY")
        cursor.execute("PRAGMA cache_size=-65536")
        cursor.close()
        # Let SQLAlchemy, not pysqlite, open transactions (see the "begin" hook):
        # pysqlite's own handling breaks SAVEPOINT and delays BEGIN.
        dbapi_conn.isolation_level = None

    @event.listens_for(engine, "begin")
    def _sqlite_begin(conn: Connection) -> None:
        wait_s = _set_lock_deadline(conn)
        read_only = bool(conn.get_execution_options().get(READ_ONLY))
        _sqlite_query_only(conn, read_only)
        if read_only:
            conn.exec_driver_sql("BEGIN DEFERRED")
            return
        if wait_s is None:
            conn.exec_driver_sql(f"BEGIN {sqlite_begin}")
            return
        # A transaction of `waiting_for_locks`: SQLite's busy handler waits for the
        # write lock up to its deadline (polling, at most 100 ms apart), not busy_ms.
        conn.exec_driver_sql(f"PRAGMA busy_timeout={round(wait_s * 1000)}").close()
        try:
            conn.exec_driver_sql(f"BEGIN {sqlite_begin}")
        except OperationalError as exc:
            if "locked" in str(exc.orig) or "busy" in str(exc.orig):
                raise PassBusy(wait_s, exc.orig) from exc
            raise
        finally:
            conn.exec_driver_sql(f"PRAGMA busy_timeout={int(busy_ms)}").close()

    return engine


def _bind_none_and_bytes_directly() -> None:
    """pysqlite binds int, float and str as they are, but sends None and bytes
    through its adapter protocol: for each such value it builds a registry key, then
    fails two attribute lookups, one of which formats an AttributeError message. A
    usage row holds about eight of them (its optional columns and the block_hashes
    blob). Identity adapters
    make the registry lookup hit at once; what is bound does not change. The
    registry is the sqlite3 module's, so this applies process-wide, idempotently."""
    sqlite3.register_adapter(type(None), _still_none)
    sqlite3.register_adapter(bytes, bytes)  # bytes(b) is b itself


def _still_none(value: None) -> None:
    return value


def make_sessionmaker(
    engine: Engine, clickhouse: ClickHouse | None = None
) -> sessionmaker[Session]:
    """Sessions of `engine`; with `clickhouse` (service.clickhouse), each session
    carries it for the repository functions of usage records."""
    info = {} if clickhouse is None else {INFO_KEY: clickhouse}
    return sessionmaker(engine, expire_on_commit=False, info=info)


async def get_session(request: Request) -> AsyncIterator[Session]:
    """One session per request: committed once when the handler succeeds, rolled
    back when anything raised. Used with `scope="function"` so the commit happens
    before the response is sent: a 200 means the data is durable.

    Async, with the commit on a worker thread: as a sync generator FastAPI ran both
    its start (which does no I/O: the session connects on first use) and its end on
    worker threads, two trips a request. A failure's rollback stays on the event
    loop: it is rare and cheap, and awaiting inside a cancelled request is not."""
    async for session in _request_session(request.app.state.sessionmaker):
        yield session


async def get_read_session(request: Request) -> AsyncIterator[Session]:
    """As `get_session`, for a route that only reads (`reading_only`)."""
    async for session in _request_session(read_sessionmaker(request.app.state)):
        yield session


def read_sessionmaker(state: Any) -> sessionmaker[Session]:
    """`reading_only(state.sessionmaker)`, made once per sessionmaker the app's state
    holds (tests replace it with one bound to their connection)."""
    factory: sessionmaker[Session] = state.sessionmaker
    made = getattr(state, "read_sessionmaker", None)
    if made is None or made[0] is not factory:
        made = state.read_sessionmaker = (factory, reading_only(factory))
    return made[1]


async def _request_session(factory: sessionmaker[Session]) -> AsyncIterator[Session]:
    session = factory()
    try:
        yield session
    except BaseException:
        session.rollback()
        session.close()
        raise
    await run_in_threadpool(_commit_and_close, session)


def _commit_and_close(session: Session) -> None:
    try:
        session.commit()
    finally:
        session.close()
