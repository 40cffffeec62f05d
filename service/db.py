"""Engine and session set-up for SQLite (embedded default) and PostgreSQL."""

import sqlite3
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from service.clickhouse import INFO_KEY
from service.clickhouse.client import ClickHouse
from service.settings import Settings


def is_sqlite(url: str) -> bool:
    return url.startswith("sqlite")


def make_engine(settings: Settings, *, sqlite_begin: str = "IMMEDIATE", **kwargs: Any) -> Engine:
    """`sqlite_begin`: IMMEDIATE takes SQLite's write lock when a transaction starts,
    so a transaction that reads (the token) and then writes waits for the lock
    (busy_timeout) instead of failing on a stale snapshot; long read-only passes
    use DEFERRED so they never hold it."""
    url = settings.database_url
    if not is_sqlite(url):
        # pre_ping: after a PostgreSQL restart, stale pooled connections are
        # replaced instead of failing the first request of each.
        return create_engine(url, pool_pre_ping=True, **kwargs)
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
    def _sqlite_begin(conn: Any) -> None:
        conn.exec_driver_sql(f"BEGIN {sqlite_begin}")

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
    session: Session = request.app.state.sessionmaker()
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
