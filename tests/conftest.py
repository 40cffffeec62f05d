"""Shared fixtures: a migrated database (SQLite, or PostgreSQL when
CACHEWATCH_TEST_DATABASE_URL says so), per-test transaction rollback, an app bound
to the test transaction, and a real server process on loopback."""

import os
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import Connection, Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from service import migrate
from service.api.app import create_app
from service.db import make_engine
from service.server_process import free_port, start_server, stop_server
from service.services.tokens import Scope, create_token
from service.settings import Settings

PROJECT_ROOT = Path(__file__).resolve().parent.parent
SHARED = PROJECT_ROOT.parent / "shared"
IN_CI = os.environ.get("CI", "").lower() == "true"
POSTGRES_ADMIN_URL = os.environ.get(
    "CACHEWATCH_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


_CHDB_DIR: list[Path] = []


def chdb_dir() -> Path:
    """chdb keeps one data directory per process (a second one is refused), so every
    test of this process that uses it shares this one, each in its own database."""
    if not _CHDB_DIR:
        _CHDB_DIR.append(Path(tempfile.mkdtemp(prefix="cachewatch-chdb-")))
    return _CHDB_DIR[0]


def test_database_url() -> str:
    return os.environ.get("CACHEWATCH_TEST_DATABASE_URL", "sqlite")


def is_postgres_run() -> bool:
    return test_database_url().startswith("postgresql")


def skip_or_fail(reason: str) -> None:
    """Outside CI a missing outside resource skips the test; under CI=true it fails."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: failing instead of skipping)")
    pytest.skip(reason)


def shared_path(*parts: str) -> Path:
    path = SHARED.joinpath(*parts)
    if not path.exists():
        skip_or_fail(f"{path} is absent: the shared traces folder is needed for this test")
    return path


def fresh_database_url(tmp_dir: Path, label: str) -> str:
    """A new empty database of the backend under test."""
    if not is_postgres_run():
        return f"sqlite:///{tmp_dir / (label + '.db')}"
    name = f"cw_{label}_{uuid.uuid4().hex[:10]}"
    admin = create_engine(test_database_url(), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return make_url(test_database_url()).set(database=name).render_as_string(hide_password=False)


def drop_database(url: str) -> None:
    if not url.startswith("postgresql"):
        return
    name = make_url(url).database
    admin = create_engine(test_database_url(), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(scope="session")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if is_postgres_run():
        try:
            probe = create_engine(test_database_url())
            with probe.connect():
                pass
            probe.dispose()
        except Exception as exc:
            skip_or_fail(f"PostgreSQL at {test_database_url()} is unreachable: {exc}")
    url = fresh_database_url(tmp_path_factory.mktemp("db"), "suite")
    yield url
    drop_database(url)


@pytest.fixture(scope="session")
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, sqlite_busy_timeout_ms=2000, run_jobs=False)


@pytest.fixture(scope="session")
def engine(settings: Settings) -> Iterator[Engine]:
    """The suite's database, migrated with `alembic upgrade head`."""
    engine = make_engine(settings)
    migrate.upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def connection(engine: Engine) -> Iterator[Connection]:
    """A connection inside a transaction that is rolled back after the test."""
    with engine.connect() as conn:
        outer = conn.begin()
        yield conn
        if outer.is_active:
            outer.rollback()


@pytest.fixture
def session_factory(connection: Connection) -> sessionmaker[Session]:
    # Commits inside the code under test only release savepoints.
    return sessionmaker(
        bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False
    )


@pytest.fixture
def session(session_factory: sessionmaker[Session]) -> Iterator[Session]:
    with session_factory() as session:
        yield session


@pytest.fixture
def app(settings: Settings, session_factory: sessionmaker[Session]) -> FastAPI:
    app = create_app(settings)
    app.state.sessionmaker = session_factory
    return app


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client


@pytest.fixture
def make_token(session_factory: sessionmaker[Session]):  # type: ignore[no-untyped-def]
    def make(scope: str, name: str = "test") -> str:
        with session_factory() as session:
            token = create_token(session, Scope(scope), name)
            session.commit()
        return token

    return make


@pytest.fixture
def ingest_headers(make_token) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {"Authorization": f"Bearer {make_token('ingest')}"}


@pytest.fixture
def read_headers(make_token) -> dict[str, str]:  # type: ignore[no-untyped-def]
    return {"Authorization": f"Bearer {make_token('read')}"}


@dataclass
class LiveServer:
    """A real `cachewatch serve` process on loopback with its own database."""

    url: str
    database_url: str
    env: dict[str, str]
    port: int
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    def start(self) -> None:
        assert self.log_path is not None
        self.process = start_server(self.env, self.port, self.log_path, cwd=PROJECT_ROOT)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self) -> None:
        if self.process is not None:
            stop_server(self.process)

    def token(self, scope: str) -> str:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "service.cli",
                "token",
                "create",
                "--scope",
                scope,
                "--name",
                "live-test",
            ],
            env=self.env,
            cwd=PROJECT_ROOT,
            capture_output=True,
            check=True,
        )
        return out.stdout.decode().strip()


def run_cachewatch(
    env: dict[str, str], *args: str, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`cachewatch ARGS...` of this checkout in a process of its own, with `env`
    alone; its exit code and output, whatever they are."""
    return subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def make_live_server(tmp_path: Path, database_url: str, **settings: str) -> LiveServer:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEWATCH_")}
    env["CACHEWATCH_DATABASE_URL"] = database_url
    env.update({f"CACHEWATCH_{k.upper()}": v for k, v in settings.items()})
    server = LiveServer(
        f"http://127.0.0.1:{port}",
        database_url,
        env,
        port,
        log_path=tmp_path / f"server-{port}.log",
    )
    return server


@pytest.fixture
def live_server(tmp_path: Path, database_url: str) -> Iterator[LiveServer]:
    """A server on its own fresh database (same backend as the suite)."""
    url = fresh_database_url(tmp_path, "live")
    server = make_live_server(tmp_path, url)
    server.start()
    yield server
    server.stop()
    drop_database(url)
