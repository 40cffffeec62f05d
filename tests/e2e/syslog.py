"""syslog-ng as a real log shipper for the end-to-end tests: the usage lines it
ships, its configuration (file source -> http() destination with flow control), a
foreground process with private state files, and the checks on what got stored.
Shared by test_syslog_ng.py and test_crash_stream.py (fixtures in conftest.py)."""

import glob
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import orjson
from sqlalchemy import Engine, func, select

from service.models import RejectedRecord, UsageRecord
from service.server_process import stop_server
from tests.conftest import skip_or_fail

SYSLOG_NG = "/usr/sbin/syslog-ng"
BATCH_LINES = 500


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


def config(
    ndjson: Path, url: str, token: str, *, batch_lines: int = BATCH_LINES, workers: int = 2
) -> str:
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
        url("{url}/v1/usage")
        method("POST")
        headers("Authorization: Bearer {token}", "Content-Type: application/x-ndjson")
        body("${{MESSAGE}}")
        delimiter("\\n")
        batch-lines({batch_lines})
        batch-bytes(1048576)
        batch-timeout(200)
        timeout(30)
        retries(10)
        workers({workers})
    );
}};
log {{ source(s_usage); destination(d_cachewatch); flags(flow-control); }};
"""


def find_syslog_ng() -> str:
    """The binary with its http module, or skip (fail under CI)."""
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
        stop_server(shipper, timeout_s=15)


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


def wait_for_count_at_least(engine: Engine, minimum: int, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while (stored := stored_count(engine)) < minimum:
        assert time.monotonic() < deadline, f"fewer than {minimum} records after {timeout_s}s"
        time.sleep(0.05)
    return stored


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
