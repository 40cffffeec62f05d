"""`cachewatch detect` beside a running `cachewatch serve` whose jobs run every second
or two: while another pass holds the database, the command and the server's jobs
wait for it up to CACHEWATCH_PASS_LOCK_WAIT_S, then run; past that they skip with
one clear line (the command: exit code 75; the server: one warning). Never a
traceback.

The pass in progress is forced, not left to timing luck: the test holds the lock a
pass needs from a connection of its own, longer than SQLite's busy timeout (on
SQLite: BEGIN IMMEDIATE, the write lock; on PostgreSQL: the detection and analytics
advisory locks)."""

import os
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson
from sqlalchemy import create_engine, func, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from service.models import AnalyticsCursor, Regression, UsageRecord
from service.repository.detection import DETECTION_LOCK_KEY
from service.repository.locks import ANALYTICS_LOCK_KEY
from tests.alerts.traffic import drop_records
from tests.conftest import LiveServer, drop_database, fresh_database_url, make_live_server

BUSY_TIMEOUT_MS = 1000  # what a writer waited for SQLite's lock before the fix
CONCURRENT_RUNS = 4
APP_NAME = "cachewatch-detect-beside"
JOB_SKIPPED = re.compile(r"^job \w+ skipped", re.MULTILINE)
SKIPPED = re.compile(
    r"^detect: another detection or analytics pass holds the database "
    r"\(waited (\d+) s\); skipped, run again later$"
)


def cachewatch() -> list[str]:
    """The console script installed beside this interpreter (as users run it)."""
    script = Path(sys.executable).with_name("cachewatch")
    return [str(script)] if script.exists() else [sys.executable, "-m", "service.cli"]


@contextmanager
def server_with_work(tmp_path: Path, lock_wait_s: float) -> Iterator[LiveServer]:
    """A server with every job on a short interval, records posted, and its own
    detection job already through them once (the jobs have work and are running)."""
    url = fresh_database_url(tmp_path, "beside")
    server = make_live_server(
        tmp_path,
        url,
        analytics_interval_s="1",
        detect_interval_s="2",
        alerts_interval_s="1",
        retention_interval_s="2",
        sqlite_busy_timeout_ms=str(BUSY_TIMEOUT_MS),
        pass_lock_wait_s=str(lock_wait_s),
    )
    server.start()
    try:
        records = drop_records("assistant", "m")
        headers = {"Authorization": f"Bearer {server.token('ingest')}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=60) as client:
            for i in range(0, len(records), 200):
                body = b"\n".join(orjson.dumps(r) for r in records[i : i + 200])
                answer = client.post("/v1/usage", content=body)
                assert answer.status_code == 200 and not answer.json()["rejected"], answer.text
        engine = create_engine(url, poolclass=NullPool)
        deadline = time.monotonic() + 120
        while True:
            with engine.connect() as conn:
                regressions = conn.scalar(select(func.count()).select_from(Regression))
                cursor = conn.scalar(
                    select(AnalyticsCursor.last_id).where(AnalyticsCursor.name == "usage")
                )
                newest = conn.scalar(select(func.max(UsageRecord.id)))
            if regressions and cursor == newest:
                break
            assert time.monotonic() < deadline, server_log(server)[-3000:]
            time.sleep(0.2)
        engine.dispose()
        yield server
    finally:
        server.stop()
        drop_database(url)


@dataclass
class Run:
    """A `cachewatch detect` process, its output in files: a pipe nobody reads fills
    up with a long traceback and stalls the process, which then looks still waiting."""

    process: subprocess.Popen[bytes]
    stdout: Path
    stderr: Path

    def finish(self, timeout_s: float = 120) -> tuple[int, str, str]:
        code = self.process.wait(timeout_s)
        return code, self.stdout.read_text(), self.stderr.read_text()


def start_detect(server: LiveServer, lock_wait_s: float, folder: Path) -> list[Run]:
    url = server.database_url
    if not url.startswith("sqlite"):  # to tell its connections in pg_stat_activity
        url = (
            make_url(url)
            .update_query_dict({"application_name": APP_NAME})
            .render_as_string(hide_password=False)
        )
    env = {
        **server.env,
        "CACHEWATCH_DATABASE_URL": url,
        "CACHEWATCH_PASS_LOCK_WAIT_S": str(lock_wait_s),
    }
    runs = []
    for n in range(CONCURRENT_RUNS):
        out, err = folder / f"detect-{n}.out", folder / f"detect-{n}.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            process = subprocess.Popen(
                [*cachewatch(), "detect", "--json"], env=env, stdout=stdout, stderr=stderr
            )
        runs.append(Run(process, out, err))
    return runs


def wait_until_connected(runs: list[Run], hold: "Holder") -> None:
    """Until every run has connected to the database (it then asks for the lock at
    once), however long starting them took (seconds on a busy machine, imports)."""
    deadline = time.monotonic() + 120
    while True:
        exited = [run.finish() for run in runs if run.process.poll() is not None]
        assert not exited, [err[-3000:] for _, _, err in exited]
        if hold.connected(runs) == len(runs):
            return
        assert time.monotonic() < deadline, "the detect runs never connected"
        time.sleep(0.1)


class Holder:
    """Holds what a pass needs, from a connection of our own, until released."""

    def __init__(self, database_url: str) -> None:
        self.url = database_url
        if database_url.startswith("sqlite"):
            path = make_url(database_url).database
            assert path is not None
            self.path = os.path.realpath(path)
            self.sqlite = sqlite3.connect(
                path, isolation_level=None, timeout=30, check_same_thread=False
            )
            self.sqlite.execute("BEGIN IMMEDIATE")
            return
        self.engine = create_engine(database_url, poolclass=NullPool)
        self.pg = self.engine.connect()
        self.pg.execute(
            text("SELECT pg_advisory_lock(:d), pg_advisory_lock(:a)"),
            {"d": DETECTION_LOCK_KEY, "a": ANALYTICS_LOCK_KEY},
        )
        self.pg.commit()

    def connected(self, runs: list[Run]) -> int:
        """How many of `runs` have the database open."""
        if self.url.startswith("sqlite"):
            return sum(self._has_file_open(run.process.pid) for run in runs)
        query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = :name"
        count = self.pg.scalar(text(query), {"name": APP_NAME})
        self.pg.commit()
        return int(count or 0)

    def _has_file_open(self, pid: int) -> bool:
        folder = Path(f"/proc/{pid}/fd")
        try:
            return any(os.path.realpath(fd) == self.path for fd in folder.iterdir())
        except OSError:  # exited, or an fd closed while listed
            return False

    def release(self) -> None:
        if self.url.startswith("sqlite"):
            self.sqlite.execute("ROLLBACK")
            self.sqlite.close()
            return
        self.pg.execute(text("SELECT pg_advisory_unlock_all()"))
        self.pg.commit()
        self.pg.close()
        self.engine.dispose()


@contextmanager
def pass_in_progress(database_url: str) -> Iterator[Holder]:
    hold = Holder(database_url)
    try:
        yield hold
    finally:
        hold.release()


def server_log(server: LiveServer) -> str:
    assert server.log_path is not None
    return server.log_path.read_text(errors="replace")


def assert_no_traceback_in_server_log(server: LiveServer, log_before: int) -> str:
    log = server_log(server)[log_before:]
    assert "Traceback" not in log and "database is locked" not in log, log[-4000:]
    assert not re.search(r"job \w+ failed", log), log[-4000:]
    return log


def test_detect_waits_for_a_pass_in_progress_then_runs(tmp_path: Path, database_url: str) -> None:
    """Held until every run has waited 3 busy timeouts for it: every `detect` run, and
    every server job, waits and then runs; the runs report the regression the server
    found."""
    with server_with_work(tmp_path, lock_wait_s=60) as server:
        log_before = len(server_log(server))
        with pass_in_progress(server.database_url) as hold:
            runs = start_detect(server, lock_wait_s=60, folder=tmp_path)
            wait_until_connected(runs, hold)
            time.sleep(3 * BUSY_TIMEOUT_MS / 1000)
            # Still waiting, none gave up: before the fix each failed after 1 s.
            early = [run.finish() for run in runs if run.process.poll() is not None]
            assert not early, [err[-3000:] for _, _, err in early]
        for code, out, err in [run.finish() for run in runs]:
            assert code == 0, err[-3000:]
            assert "Traceback" not in err, err[-3000:]
            assert [r["service"] for r in orjson.loads(out)] == ["assistant"], out
        time.sleep(3)  # the server's jobs run again after the hold
        log = assert_no_traceback_in_server_log(server, log_before)
        assert not JOB_SKIPPED.search(log), log[-4000:]


def test_detect_gives_up_after_the_wait_with_one_clear_line(
    tmp_path: Path, database_url: str
) -> None:
    """Held longer than CACHEWATCH_PASS_LOCK_WAIT_S (2 s): each run prints one line
    on stderr, nothing on stdout, and exits 75; the server's jobs log one warning
    line each time they skip, no traceback; once the hold ends, detection runs."""
    wait_s = 2
    with server_with_work(tmp_path, lock_wait_s=wait_s) as server:
        log_before = len(server_log(server))
        with pass_in_progress(server.database_url):
            runs = start_detect(server, lock_wait_s=wait_s, folder=tmp_path)
            deadline = time.monotonic() + 60  # before the fix, PostgreSQL waited on
            while time.monotonic() < deadline and any(r.process.poll() is None for r in runs):
                time.sleep(0.1)
            time.sleep(2 * wait_s)  # the server's jobs give up too
        for code, out, err in [run.finish() for run in runs]:
            assert code == 75, err[-3000:]
            assert out == ""
            lines = err.splitlines()
            assert len(lines) == 1, err[-3000:]
            match = SKIPPED.match(lines[0])
            assert match is not None and int(match.group(1)) == wait_s, lines
        log = assert_no_traceback_in_server_log(server, log_before)
        # (APScheduler also says when a run is not started because the last one is
        # still waiting: "Execution of job ... skipped: maximum number of running
        # instances reached"; that is its own line, no traceback.)
        skipped = [line for line in log.splitlines() if JOB_SKIPPED.match(line)]
        assert skipped, log[-4000:]
        assert all(
            line == f"job {line.split()[1]} skipped: another pass holds the database "
            f"(waited {wait_s} s); it runs again at its next interval"
            for line in skipped
        ), skipped
        after = subprocess.run(
            [*cachewatch(), "detect"], env=server.env, capture_output=True, text=True, timeout=120
        )
        assert after.returncode == 0, after.stderr[-3000:]
        assert after.stdout.startswith("#"), after.stdout
