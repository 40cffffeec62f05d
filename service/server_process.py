"""A `cachewatch serve` process on loopback, started and stopped the same way by the
demo, the benches and the tests' live server: it is only handed out once
`/healthz` answers, and a stop that SIGTERM does not end within 10 s is a SIGKILL."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(
    env: dict[str, str],
    port: int,
    log_path: Path,
    *,
    cwd: Path | None = None,
    timeout_s: float = 60.0,
) -> subprocess.Popen[bytes]:
    """`cachewatch serve --port PORT` with `env`, its output appended to `log_path`;
    returns once it answers on /healthz (RuntimeError with the log's tail if it
    exits or does not answer within `timeout_s`)."""
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "service.cli", "serve", "--port", str(port)],
            env=env,
            cwd=cwd,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}/healthz"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited: {_tail(log_path)}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return process
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    stop_server(process)
    raise RuntimeError(f"the server did not start within {timeout_s:.0f} s: {_tail(log_path)}")


def stop_server(process: subprocess.Popen[bytes], timeout_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout_s`."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


def _tail(log_path: Path) -> str:
    return log_path.read_text(errors="replace")[-2000:]
