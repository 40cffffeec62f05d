"""The database unavailable: every answer that needs it is 503 with Retry-After (the
shipper retries), and a retry after recovery stores everything exactly once.

SQLite: a writer holding the lock longer than the busy timeout. PostgreSQL: a
throwaway cluster of our own, stopped and started again (the suite's shared
cluster is never touched)."""

import glob
import os
import shutil
import sqlite3
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.engine import make_url

from service.models import UsageRecord
from tests.conftest import LiveServer, free_port, is_postgres_run, make_live_server, skip_or_fail

BATCH = 500


def batch(start: int, count: int = BATCH) -> bytes:
    return b"".join(
        orjson.dumps(
            {
                "request_id": f"outage-{i:06d}",
                "ts": 1_714_564_800 + i,
                "service": "assistant",
                "model": "m",
                "prompt_tokens": 2048,
                "cached_tokens": 1024,
                "block_size": 512,
                "block_hashes": [i, i + 1, i + 2, i + 3],
            }
        )
        + b"\n"
        for i in range(start, start + count)
    )


def stored_request_ids(database_url: str) -> list[str]:
    engine = create_engine(database_url)
    try:
        with engine.connect() as conn:
            return list(conn.scalars(select(UsageRecord.request_id)))
    finally:
        engine.dispose()


def assert_unavailable(answer: httpx.Response) -> None:
    assert answer.status_code == 503, answer.text
    retry_after = answer.headers.get("retry-after", "")
    assert retry_after.isdigit() and int(retry_after) >= 1, answer.headers
    assert "unavailable" in answer.json()["error"]


def assert_all_accepted(answer: httpx.Response, count: int) -> None:
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"accepted": count, "duplicates": 0, "rejected": 0, "errors": []}


# --- SQLite: the lock held by another writer ---------------------------------------


@pytest.fixture
def sqlite_server(tmp_path: Path) -> Iterator[LiveServer]:
    if is_postgres_run():
        pytest.skip("SQLite locking: runs in the SQLite pass")
    # A short busy timeout: the request gives up on the lock quickly and says 503.
    # No background jobs: only the test's own lock may make the server wait.
    server = make_live_server(
        tmp_path,
        f"sqlite:///{tmp_path / 'outage.db'}",
        sqlite_busy_timeout_ms="200",
        run_jobs="false",
    )
    server.start()
    yield server
    server.stop()


def test_sqlite_locked_answers_503_then_retry_stores_once(
    sqlite_server: LiveServer, tmp_path: Path
) -> None:
    headers = {"Authorization": f"Bearer {sqlite_server.token('ingest')}"}
    read = {"Authorization": f"Bearer {sqlite_server.token('read')}"}
    body = batch(0)
    with httpx.Client(base_url=sqlite_server.url, headers=headers, timeout=30) as client:
        # isolation_level=None: sqlite3 leaves BEGIN/COMMIT to us.
        locker = sqlite3.connect(tmp_path / "outage.db", isolation_level=None, timeout=5)
        try:
            locker.execute("BEGIN EXCLUSIVE")
            assert_unavailable(client.post("/v1/usage", content=body))
            # Reads take no lock (a WAL snapshot): the health check and the read
            # routes still answer, so a long write does not take the server out of
            # its load balancer.
            assert client.get("/healthz").status_code == 200
            assert client.get("/v1/rejected", headers=read).status_code == 200
            # The refused batch left nothing behind, half-written or otherwise.
            assert locker.execute("SELECT count(*) FROM usage_records").fetchone() == (0,)
        finally:
            locker.execute("ROLLBACK")
            locker.close()

        assert client.get("/healthz").status_code == 200
        assert_all_accepted(client.post("/v1/usage", content=body), BATCH)
        again = client.post("/v1/usage", content=body)
        assert again.json()["accepted"] == 0 and again.json()["duplicates"] == BATCH

    ids = stored_request_ids(sqlite_server.database_url)
    assert sorted(ids) == [f"outage-{i:06d}" for i in range(BATCH)]


# --- PostgreSQL: a throwaway cluster, stopped and restarted -------------------------


def postgres_bin() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_major_version)
    if not found:
        skip_or_fail("PostgreSQL server binaries (initdb, pg_ctl) are not installed")
    return Path(found[-1]).parent


def _major_version(initdb: str) -> int:
    version = Path(initdb).parent.parent.name
    return int(version) if version.isdigit() else 0


@dataclass
class ThrowawayPostgres:
    bin_dir: Path
    data_dir: Path
    socket_dir: Path
    port: int
    as_user: list[str]

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def run(self, *args: str, timeout: float = 60) -> None:
        done = subprocess.run(
            [*self.as_user, *args], capture_output=True, timeout=timeout, check=False
        )
        assert done.returncode == 0, (done.stdout + done.stderr).decode()[-3000:]

    def pg_ctl(self, *args: str) -> None:
        self.run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), "-w", "-t", "60", *args)

    def start(self) -> None:
        # Loopback TCP only, sockets in our own directory: no clash with the
        # shared cluster on 5432.
        options = f"-p {self.port} -k {self.socket_dir} -c listen_addresses=127.0.0.1 -F"
        self.pg_ctl("-o", options, "-l", str(self.data_dir.parent / "postgres.log"), "start")

    def stop(self) -> None:
        self.pg_ctl("stop", "-m", "fast")


@pytest.fixture
def throwaway_postgres() -> Iterator[ThrowawayPostgres]:
    if not is_postgres_run():
        pytest.skip("PostgreSQL outage: runs in the PostgreSQL pass")
    bin_dir = postgres_bin()
    as_user: list[str] = []
    # pytest's tmp_path is private to root (0700), which the `postgres` user cannot
    # enter: the cluster lives in a directory of its own under /tmp.
    root = Path(tempfile.mkdtemp(prefix="cachewatch-pg-"))
    if os.geteuid() == 0:
        # initdb and postgres refuse to run as root.
        runuser = shutil.which("runuser")
        if runuser is None:
            skip_or_fail("running as root without runuser: cannot start PostgreSQL as postgres")
        as_user = [str(runuser), "-u", "postgres", "--"]
        shutil.chown(root, "postgres", "postgres")
    cluster = ThrowawayPostgres(bin_dir, root / "data", root, free_port(), as_user)
    started = False
    try:
        cluster.run(
            str(bin_dir / "initdb"),
            "-D",
            str(cluster.data_dir),
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
            timeout=120,
        )
        cluster.start()
        started = True
        yield cluster
    finally:
        if started:
            subprocess.run(
                [
                    *as_user,
                    str(bin_dir / "pg_ctl"),
                    "-D",
                    str(cluster.data_dir),
                    "-m",
                    "immediate",
                    "stop",
                ],
                capture_output=True,
                timeout=60,
                check=False,
            )
        shutil.rmtree(root, ignore_errors=True)


def test_postgres_down_answers_503_then_retry_stores_once(
    throwaway_postgres: ThrowawayPostgres, tmp_path: Path
) -> None:
    assert make_url(throwaway_postgres.url).port != 5432
    server = make_live_server(tmp_path, throwaway_postgres.url, run_jobs="false")
    server.start()
    try:
        headers = {"Authorization": f"Bearer {server.token('ingest')}"}
        before, during = batch(0), batch(BATCH)
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
            assert_all_accepted(client.post("/v1/usage", content=before), BATCH)

            throwaway_postgres.stop()
            assert_unavailable(client.post("/v1/usage", content=during))
            assert_unavailable(client.post("/v1/usage", content=during))  # not a one-off
            assert_unavailable(client.get("/healthz"))

            throwaway_postgres.start()
            # The pooled connections died with the cluster; the first retry after
            # recovery must still succeed, not spend itself on a stale connection.
            assert_all_accepted(client.post("/v1/usage", content=during), BATCH)
            again = client.post("/v1/usage", content=before + during)
            assert again.json()["accepted"] == 0 and again.json()["duplicates"] == 2 * BATCH
            assert client.get("/healthz").status_code == 200
    finally:
        server.stop()

    ids = stored_request_ids(throwaway_postgres.url)
    assert len(ids) == 2 * BATCH
    assert set(ids) == {f"outage-{i:06d}" for i in range(2 * BATCH)}
