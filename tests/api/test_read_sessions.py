"""The read routes' sessions (`service.db.reading_only`): on SQLite they take no lock,
so readers never queue behind each other or behind a batch being written (a
dashboard's five data requests used to, and the last answered 503 once the ones
before it took longer than the busy timeout); on both backends they refuse writes.

Against an app on a real engine (the other API tests bind the app to a test
connection, where the read sessions are the same as the others)."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

from service import migrate
from service.api.app import create_app
from service.db import make_engine, make_sessionmaker, reading_only
from service.services.tokens import Scope, create_token
from service.settings import Settings
from tests.conftest import drop_database, fresh_database_url, is_postgres_run

T0 = 1_764_460_800  # 2025-11-30T00:00:00Z

# Every GET route of the API and the dashboard, with parameters it accepts.
READS = (
    "/healthz",
    "/v1/regressions",
    "/v1/events",
    "/v1/rejected",
    "/v1/alerts",
    "/v1/capacity",
    "/metrics",
    "/",
    "/v1/metrics?bucket=1h",
    "/v1/diagnoses",
    "/v1/findings",
    "/v1/groups?by=tenant",
    "/dashboard/data/series",
    "/dashboard/data/capacity",
    "/dashboard/data/tables",
    "/dashboard/data/findings",
    "/dashboard/data/groups?by=tenant",
)
# Those that catch the rollups up first (`CaughtUp`), which writes in a transaction
# of its own: on SQLite that one waits for the write lock like any writer.
CATCHING_UP = ("/v1/metrics", "/v1/diagnoses", "/v1/findings", "/v1/groups", "/dashboard/data")


@pytest.fixture
def url(tmp_path: Path) -> Iterator[str]:
    url = fresh_database_url(tmp_path, "reads")
    yield url
    drop_database(url)


@pytest.fixture
def engine(url: str) -> Iterator[Engine]:
    engine = make_engine(Settings(database_url=url), pool_size=1, max_overflow=0)
    migrate.upgrade(engine)
    yield engine
    engine.dispose()


def _records() -> list[dict[str, Any]]:
    return [
        {
            "request_id": f"r{i}",
            "ts": T0 + 60 * i,
            "service": "svc",
            "model": "m",
            "prompt_tokens": 2000,
            "cached_tokens": 1000 * (i % 2),
            "session_id": f"s{i % 3}",
            "tenant": f"t{i % 4}",
            "block_size": 1000,
            "block_hashes": [f"{i % 3:016x}", f"{i:016x}"],
        }
        for i in range(200)
    ]


def _served(url: str, busy_ms: int) -> tuple[TestClient, dict[str, str], dict[str, str]]:
    app = create_app(Settings(database_url=url, run_jobs=False, sqlite_busy_timeout_ms=busy_ms))
    with app.state.sessionmaker.begin() as session:
        ingest = create_token(session, Scope.INGEST, "ingest")
        read = create_token(session, Scope.READ, "read")
    return (
        TestClient(app, raise_server_exceptions=False),
        {"Authorization": f"Bearer {ingest}"},
        {"Authorization": f"Bearer {read}"},
    )


def test_a_read_only_session_refuses_writes_and_leaves_the_connection_writable(
    engine: Engine,
) -> None:
    """One pooled connection: a read-only transaction on it, then an ordinary one."""
    factory = make_sessionmaker(engine)
    last_id = text("SELECT last_id FROM analytics_cursor WHERE name = 't'")
    with factory.begin() as session:
        session.execute(
            text("INSERT INTO analytics_cursor (name, last_id, updated_us) VALUES ('t', 1, 0)")
        )
    with pytest.raises(DBAPIError, match=r"(?i)read.?only"), reading_only(factory)() as session:
        assert session.execute(last_id).scalar_one() == 1
        session.execute(text("UPDATE analytics_cursor SET last_id = 2"))
    with factory.begin() as session:
        session.execute(text("UPDATE analytics_cursor SET last_id = 3"))
    with reading_only(factory)() as session:
        assert session.execute(last_id).scalar_one() == 3


def test_every_read_route_answers_from_a_read_only_session(engine: Engine, url: str) -> None:
    """No GET route writes through its session: on PostgreSQL a write in a READ ONLY
    transaction is an error (500), on SQLite `query_only` refuses it."""
    client, ingest, read = _served(url, busy_ms=5000)
    with client:
        posted = client.post("/v1/usage", json=_records(), headers=ingest)
        assert posted.status_code == 200 and posted.json()["accepted"] == 200
        for path in READS:
            answer = client.get(path, headers=read, follow_redirects=False)
            assert answer.status_code in (200, 202), (path, answer.status_code, answer.text)


def test_readers_do_not_wait_for_a_writer_on_sqlite(engine: Engine, url: str) -> None:
    """A transaction holding SQLite's write lock (a batch being written, a pass step)
    for longer than the busy timeout: the routes that only read still answer."""
    if is_postgres_run():
        pytest.skip("SQLite's write lock: runs in the SQLite pass")
    client, ingest, read = _served(url, busy_ms=200)
    with client:
        assert client.post("/v1/usage", json=_records(), headers=ingest).status_code == 200
        assert client.get("/v1/metrics", headers=read).status_code == 200  # caught up
        with engine.connect() as writer:
            writer.exec_driver_sql("UPDATE analytics_cursor SET updated_us = updated_us")  # locks
            for path in READS:
                if path.startswith(CATCHING_UP):
                    continue
                answer = client.get(path, headers=read, follow_redirects=False)
                assert answer.status_code == 200, (path, answer.status_code, answer.text)
            blocked = client.post("/v1/usage", json=_records()[:1], headers=ingest)
            assert blocked.status_code == 503  # a writer does wait, and gives up
            writer.rollback()
