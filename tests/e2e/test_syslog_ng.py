"""A real log shipper end to end: syslog-ng tails an NDJSON file and its http()
destination posts batches to a live `cachewatch serve`; every record must be stored
exactly once."""

import glob
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from sqlalchemy import Engine, create_engine, func, select

from service.models import RejectedRecord, UsageRecord
from tests.conftest import LiveServer, skip_or_fail

SYSLOG_NG = "/usr/sbin/syslog-ng"
RECORDS_BEFORE_START = 3000  # in the file when syslog-ng starts: read from the top
RECORDS_APPENDED = 2000  # appended while it runs: picked up by following the file
BATCH_LINES = 500
DELIVERY_TIMEOUT_S = 90


def usage_line(i: int) -> bytes:
    return orjson.dumps(
        {
            "request_id": f"syslog-{i:06d}",
            "ts": f"2024-05-01T12:{i // 3600 % 60:02d}:{i // 60 % 60:02d}.{i % 60:06d}Z",
            "service": "assistant",
            "model": "llama-3-70b",
            "prompt_tokens": 1000 + i,
            "cached_tokens": i % 1000,
            "replica": f"pod-{i % 4}",
            "block_size": 64,
            "block_hashes": [i // 10 * 100 + b for b in range(8)],
            # Characters a shipper could mangle: quotes, backslash, non-ASCII.
            "attributes": {"note": 'say "hi" \\ café', "n": i},
        }
    )


def config(ndjson: Path, server: LiveServer, token: str) -> str:
    # flags(no-parse): each line is the message, verbatim. flow-control with a
    # window larger than a batch: the source waits for the destination instead of
    # dropping, and a batch can fill before batch-timeout.
    return f"""\
@version: 3.38
options {{ stats-freq(0); time-reopen(1); log-msg-size(65536); }};
source s_usage {{
    file("{ndjson}" flags(no-parse) follow-freq(0.1)
         log-fetch-limit(1000) log-iw-size(20000));
}};
destination d_cachewatch {{
    http(
        url("{server.url}/v1/usage")
        method("POST")
        headers("Authorization: Bearer {token}", "Content-Type: application/x-ndjson")
        body("${{MESSAGE}}")
        delimiter("\\n")
        batch-lines({BATCH_LINES})
        batch-bytes(1048576)
        batch-timeout(200)
        timeout(30)
        retries(10)
        workers(2)
    );
}};
log {{ source(s_usage); destination(d_cachewatch); flags(flow-control); }};
"""


@pytest.fixture
def syslog_ng_binary() -> str:
    if not os.access(SYSLOG_NG, os.X_OK) and shutil.which("syslog-ng") is None:
        skip_or_fail("syslog-ng is not installed (Debian: syslog-ng-core)")
    if not glob.glob("/usr/lib/syslog-ng/*/libhttp.so"):
        skip_or_fail("syslog-ng's http module is not installed (Debian: syslog-ng-mod-http)")
    return SYSLOG_NG if os.access(SYSLOG_NG, os.X_OK) else str(shutil.which("syslog-ng"))


@contextmanager
def running_syslog_ng(binary: str, conf: Path, workdir: Path) -> Iterator[Path]:
    """syslog-ng in the foreground with its own persist file, pid file and control
    socket (no clash with a system syslog-ng); --no-caps because containers often
    lack the capabilities it would keep. Yields its log file."""
    check = subprocess.run([binary, "--syntax-only", "-f", str(conf)], capture_output=True)
    assert check.returncode == 0, check.stderr.decode()
    log_path = workdir / "syslog-ng.log"
    with log_path.open("wb") as log:
        shipper = subprocess.Popen(
            [
                binary,
                "-F",
                "-e",
                "--no-caps",
                "-f",
                str(conf),
                "-R",
                str(workdir / "syslog-ng.persist"),
                "-p",
                str(workdir / "syslog-ng.pid"),
                "-c",
                str(workdir / "syslog-ng.ctl"),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield log_path
        assert shipper.poll() is None, f"syslog-ng exited: {log_path.read_text()[-3000:]}"
    finally:
        shipper.send_signal(signal.SIGTERM)
        try:
            shipper.wait(15)
        except subprocess.TimeoutExpired:
            shipper.kill()
            shipper.wait(10)


def stored_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return conn.scalar(select(func.count()).select_from(UsageRecord)) or 0


def wait_for_count(engine: Engine, expected: int, log_path: Path, timeout_s: float) -> None:
    stored = 0
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stored = stored_count(engine)
        if stored >= expected:
            break
        time.sleep(0.2)
    assert stored == expected, (
        f"{stored} of {expected} records stored after {timeout_s}s; syslog-ng said:\n"
        + log_path.read_text()[-3000:]
    )


def append_slowly(path: Path, lines: list[bytes], piece: int, pause_s: float) -> None:
    """Appended in pieces, as an application writes its log."""
    with path.open("ab") as out:
        for start in range(0, len(lines), piece):
            out.write(b"".join(line + b"\n" for line in lines[start : start + piece]))
            out.flush()
            time.sleep(pause_s)


def assert_stored_exactly_once(engine: Engine, count: int) -> None:
    with engine.connect() as conn:
        rows = conn.execute(
            select(UsageRecord.request_id, UsageRecord.prompt_tokens, UsageRecord.attributes)
        ).all()
        rejected = conn.scalar(select(func.count()).select_from(RejectedRecord))
    request_ids = [r.request_id for r in rows]
    assert len(request_ids) == count
    assert set(request_ids) == {f"syslog-{i:06d}" for i in range(count)}
    assert sum(r.prompt_tokens for r in rows) == sum(1000 + i for i in range(count))
    # Each line went through syslog-ng byte for byte (no escaping, no syslog header).
    assert all(r.attributes["note"] == 'say "hi" \\ café' for r in rows)
    assert rejected == 0


@dataclass
class Shipper:
    binary: str
    conf: Path
    workdir: Path
    ndjson: Path
    engine: Engine

    def run(self) -> AbstractContextManager[Path]:
        return running_syslog_ng(self.binary, self.conf, self.workdir)


@pytest.fixture
def shipped(live_server: LiveServer, syslog_ng_binary: str, tmp_path: Path) -> Iterator[Shipper]:
    workdir = tmp_path / "syslog-ng"
    workdir.mkdir()
    ndjson = workdir / "usage.ndjson"
    conf = workdir / "syslog-ng.conf"
    conf.write_text(config(ndjson, live_server, live_server.token("ingest")))
    engine = create_engine(live_server.database_url)
    yield Shipper(syslog_ng_binary, conf, workdir, ndjson, engine)
    engine.dispose()


def test_syslog_ng_ships_every_record_exactly_once(
    live_server: LiveServer, shipped: Shipper
) -> None:
    count = RECORDS_BEFORE_START + RECORDS_APPENDED
    lines = [usage_line(i) for i in range(count)]
    shipped.ndjson.write_bytes(b"".join(line + b"\n" for line in lines[:RECORDS_BEFORE_START]))
    with shipped.run() as log_path:
        time.sleep(0.5)
        append_slowly(shipped.ndjson, lines[RECORDS_BEFORE_START:], piece=250, pause_s=0.05)
        wait_for_count(shipped.engine, count, log_path, DELIVERY_TIMEOUT_S)
        time.sleep(1)  # a late retry of an acknowledged batch must not add rows
    assert_stored_exactly_once(shipped.engine, count)

    # It batched: far fewer POSTs than records (uvicorn logs one line per request).
    assert live_server.log_path is not None
    posts = live_server.log_path.read_text().count('"POST /v1/usage HTTP/1.1" 200')
    assert 0 < posts <= count // 10, f"{posts} POSTs for {count} records"


def test_server_crash_mid_stream_loses_and_duplicates_nothing(
    live_server: LiveServer, shipped: Shipper
) -> None:
    """kill -9 the server while syslog-ng is shipping: an unacknowledged batch is
    rolled back and resent after the restart; nothing acknowledged is lost."""
    count = 4000
    lines = [usage_line(i) for i in range(count)]
    shipped.ndjson.touch()
    with shipped.run() as log_path:
        writer = threading.Thread(
            target=append_slowly, args=(shipped.ndjson, lines, 100, 0.05), daemon=True
        )
        writer.start()
        wait_for_count_at_least(shipped.engine, 1000, timeout_s=DELIVERY_TIMEOUT_S)
        live_server.kill()
        before_restart = stored_count(shipped.engine)
        time.sleep(1.5)  # syslog-ng meets a refused connection and keeps the batch
        live_server.start()
        writer.join(60)
        wait_for_count(shipped.engine, count, log_path, DELIVERY_TIMEOUT_S)
        time.sleep(1)
    assert before_restart < count, "the crash came too late to test anything"
    assert_stored_exactly_once(shipped.engine, count)


def wait_for_count_at_least(engine: Engine, minimum: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while stored_count(engine) < minimum:
        assert time.monotonic() < deadline, f"fewer than {minimum} records after {timeout_s}s"
        time.sleep(0.05)
