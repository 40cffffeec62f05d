"""chdb runs in one process only: with `cachewatch serve` holding its directory, the
other commands that open ClickHouse stop at once with one line saying so (not
chdb's bare "Error initializing EmbeddedServer" and a traceback), and the server
goes on serving."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import LiveServer, make_live_server, run_cachewatch

pytest.importorskip("chdb")


@pytest.fixture(scope="module")
def serving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A real `cachewatch serve` on chdb (and SQLite): the process holding the
    directory."""
    folder = tmp_path_factory.mktemp("chdb-serve")
    server = make_live_server(
        folder,
        f"sqlite:///{folder / 'db.sqlite'}",
        clickhouse_url=f"chdb://{folder / 'chdb'}",
    )
    server.start()
    yield server
    server.stop()


def assert_one_line_about_chdb(done: subprocess.CompletedProcess[str]) -> None:
    assert done.returncode != 0, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "chdb runs in one process only" in lines[0], lines[0]
    assert "Traceback" not in done.stderr and done.stdout == ""


@pytest.mark.parametrize(
    "command", [["migrate"], ["worker"], ["detect"], ["report"], ["retention"]], ids=" ".join
)
def test_a_second_process_is_refused_in_one_line(serving: LiveServer, command: list[str]) -> None:
    done = run_cachewatch(serving.env, *command)
    assert_one_line_about_chdb(done)
    assert done.returncode == 1
    assert serving.process is not None
    line = done.stderr.strip()
    assert f"process {serving.process.pid}" in line, line  # who holds it
    assert "`cachewatch serve` runs the worker's jobs" in line


def test_the_server_serves_on(serving: LiveServer) -> None:
    """The refused commands touched nothing of the server's: it still answers."""
    run_cachewatch(serving.env, "detect")
    assert httpx.get(serving.url + "/healthz", timeout=10).status_code == 200


def test_serve_with_several_workers_is_refused(tmp_path: Path) -> None:
    """uvicorn's worker processes would each open the directory the parent holds."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEWATCH_")}
    env["CACHEWATCH_DATABASE_URL"] = f"sqlite:///{tmp_path / 'db.sqlite'}"
    env["CACHEWATCH_CLICKHOUSE_URL"] = f"chdb://{tmp_path / 'chdb'}"
    done = run_cachewatch(env, "serve", "--workers", "2", "--port", "1")
    assert_one_line_about_chdb(done)
    assert done.returncode == 2
    assert not (tmp_path / "chdb").exists()
