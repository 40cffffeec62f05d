"""SIGTERM during a detection pass (issue 32): a real `cachewatch serve` process stops
within a few seconds, stores nothing of the pass it stopped, and the next pass does
it all. Each (service, model) of the server's pass is made to take a second (a
wrapper around `service.cli` that slows `_detect_series`), so a pass over ten of them
takes ten. A dashboard read in flight waits for the pass (its catch-up needs the
lock the pass holds: PostgreSQL's for as long as it takes, SQLite's for its busy
timeout, here 30 s), and the server drains its requests before it stops: it used to
wait for the whole pass after SIGTERM. (The job commits a step per (service, model):
the one it was in is rolled back.)"""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import func, select

from service import migrate
from service.db import make_engine, make_sessionmaker
from service.models import Regression
from service.server_process import free_port
from service.services import analytics_pass
from service.services.detection import detect
from service.settings import Settings
from tests.conftest import PROJECT_ROOT, drop_database, fresh_database_url
from tests.services.traffic import drop_traffic, store

SERVICES = 10
SLOW_SERVE = """
import sys, time
from pathlib import Path

from service.services import detection

started, port = Path(sys.argv[1]), sys.argv[2]
detect_series = detection._detect_series


def slow(*args, **kwargs):
    started.touch()
    time.sleep(1.0)
    return detect_series(*args, **kwargs)


detection._detect_series = slow
from service.cli import app

sys.argv = ["cachewatch", "serve", "--port", port]
app()
"""


def _fill(settings: Settings) -> None:
    """Ten services, each losing its warm prefix after two hours (one regression
    each), and the analytics pass over them: the server's pass has only detection
    left to do."""
    engine = make_engine(settings)
    migrate.upgrade(engine)
    with make_sessionmaker(engine).begin() as session:
        for k in range(SERVICES):
            records = [
                {**r, "service": f"svc-{k}", "request_id": f"{k}-{r['request_id']}"}
                for r in drop_traffic()
            ]
            store(session, records)
        analytics_pass.catch_up(session, settings)
    engine.dispose()


def _listening(port: int) -> bool:
    """Whether the server accepts connections (not /healthz: it reads the database,
    which waits for the pass's lock as the read does)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def _send_read(port: int) -> socket.socket:
    """A dashboard's read of the rollups, sent: its catch-up waits for the pass's lock."""
    conn = socket.create_connection(("127.0.0.1", port), timeout=60)
    conn.sendall(b"GET /v1/metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    return conn


def _status(conn: socket.socket) -> int:
    """The status of the read's answer (0: none)."""
    answer = b""
    with conn:
        while chunk := conn.recv(65536):
            answer += chunk
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0


def _regressions(settings: Settings) -> int:
    engine = make_engine(settings)
    with make_sessionmaker(engine)() as session:
        count = int(session.scalar(select(func.count()).select_from(Regression)) or 0)
    engine.dispose()
    return count


def test_sigterm_during_a_detection_pass_stops_the_server_within_seconds(
    tmp_path: Path, database_url: str
) -> None:
    url = fresh_database_url(tmp_path, "shutdown")
    settings = Settings(database_url=url, run_jobs=False)
    try:
        _fill(settings)
        script, started = tmp_path / "slow_serve.py", tmp_path / "detection-started"
        script.write_text(SLOW_SERVE)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEWATCH_")}
        env |= {
            "PYTHONPATH": str(PROJECT_ROOT),
            "CACHEWATCH_DATABASE_URL": url,
            "CACHEWATCH_DETECT_INTERVAL_S": "1",
            "CACHEWATCH_ANALYTICS_INTERVAL_S": "3600",
            "CACHEWATCH_ALERTS_INTERVAL_S": "3600",
            "CACHEWATCH_RETENTION_INTERVAL_S": "3600",
            "CACHEWATCH_PUBLIC_READ": "true",
            "CACHEWATCH_SQLITE_BUSY_TIMEOUT_MS": "30000",
        }
        port = free_port()
        log = (tmp_path / "server.log").open("wb")
        server = subprocess.Popen(
            [sys.executable, str(script), str(started), str(port)],
            env=env,
            cwd=PROJECT_ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            while not (started.exists() and _listening(port)):
                assert server.poll() is None, (tmp_path / "server.log").read_text()
                assert time.monotonic() < deadline, "the detection pass never started"
                time.sleep(0.05)
            read = _send_read(port)
            time.sleep(0.5)  # well inside the pass's first (service, model)
            server.send_signal(signal.SIGTERM)
            stopping = time.monotonic()
            server.wait(30)
            took = time.monotonic() - stopping
        finally:
            if server.poll() is None:
                server.kill()
                server.wait(10)
            log.close()
        # It stopped after the (service, model) it was in, not after all ten.
        assert took < 4, f"{took:.1f} s after SIGTERM: {(tmp_path / 'server.log').read_text()}"
        assert _status(read) == 200  # the read went on once the pass stopped
        # Nothing of the step it stopped (the first service's) is stored; steps commit
        # one (service, model) each, and the next pass does every one.
        assert _regressions(settings) == 0, (tmp_path / "server.log").read_text()
        engine = make_engine(settings)
        with make_sessionmaker(engine).begin() as session:
            report = detect(session, settings)
        engine.dispose()
        assert sorted(r.service for r in report.created) == sorted(
            f"svc-{k}" for k in range(SERVICES)
        )
    finally:
        drop_database(url)
