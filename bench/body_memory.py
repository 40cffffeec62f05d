"""Peak memory of hostile bodies: how much a `cachewatch serve` process's peak RSS
(VmHWM) grows for the three cases of the memory issue, each on a fresh server and
SQLite file, after a warm-up:

- one gzip body inflating to 64 MiB of invalid records (each goes through pydantic
  and is kept verbatim in the rejected store);
- four such bodies in parallel;
- 16 gzip bombs of about 65 KB in parallel, each inflating past the 64 MiB limit.

Prints each case's answers (status codes, and how many 503s were retried until
they got through) and the peak growth.

    .venv/bin/python bench/body_memory.py [--case one|four|bombs] [--records-mib 64]
"""

import argparse
import gzip
import os
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import orjson

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

from service.server_process import free_port, start_server, stop_server  # noqa: E402

MiB = 1024 * 1024


def invalid_records(size: int, prefix: str) -> bytes:
    """NDJSON of records like a shipper's, each invalid (cached_tokens over
    prompt_tokens, which only pydantic's model check explains), `size` bytes or just
    under."""
    lines: list[bytes] = []
    total = 0
    while True:
        i = len(lines)
        line = orjson.dumps(
            {
                "request_id": f"{prefix}-{i:09d}",
                "ts": 1_714_564_800 + i / 100,
                "service": f"svc-{i % 4}",
                "model": "llama-3-70b",
                "prompt_tokens": 100,
                "cached_tokens": 200 + i % 7,
                "replica": f"pod-{i % 8}",
                "session_id": f"s-{i // 8}",
                "block_size": 512,
                "block_hashes": [i * 16 + b for b in range(16)],
            }
        )
        if total + len(line) + 1 > size:
            return b"\n".join(lines) + b"\n"
        lines.append(line)
        total += len(line) + 1


def gzip_bomb(inflated: int) -> bytes:
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    piece = b" " * MiB
    parts = [compressor.compress(piece) for _ in range(inflated // MiB)]
    parts.append(compressor.flush())
    return b"".join(parts)


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM (Linux only)")


@contextmanager
def server(workdir: Path) -> Iterator[tuple[str, str, int]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEWATCH_")}
    env["CACHEWATCH_DATABASE_URL"] = f"sqlite:///{workdir / 'memory.db'}"
    env["CACHEWATCH_RUN_JOBS"] = "false"
    run = [sys.executable, "-m", "service.cli"]
    subprocess.run([*run, "migrate"], env=env, cwd=PROJECT_ROOT, check=True, capture_output=True)
    token = subprocess.run(
        [*run, "token", "create", "--scope", "ingest", "--name", "bench"],
        env=env,
        cwd=PROJECT_ROOT,
        check=True,
        capture_output=True,
    ).stdout.decode()
    port = free_port()
    process = start_server(env, port, workdir / "server.log", cwd=PROJECT_ROOT)
    try:
        yield f"http://127.0.0.1:{port}", token.strip(), process.pid
    finally:
        stop_server(process)


def post_in_parallel(url: str, token: str, bodies: list[bytes]) -> tuple[Counter[int], int]:
    """Each body from its own thread, a 503 retried after its Retry-After; returns
    the final status codes and how many 503s were answered on the way."""
    finals: Counter[int] = Counter()
    busy = 0
    lock = threading.Lock()

    def send(body: bytes) -> None:
        nonlocal busy
        headers = {"Authorization": f"Bearer {token}", "Content-Encoding": "gzip"}
        with httpx.Client(base_url=url, headers=headers, timeout=600) as client:
            while True:
                answer = client.post("/v1/usage", content=body)
                if answer.status_code != 503:
                    break
                with lock:
                    busy += 1
                time.sleep(float(answer.headers["Retry-After"]))
        with lock:
            finals[answer.status_code] += 1

    threads = [threading.Thread(target=send, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return finals, busy


def measure(case: str, records_mib: int) -> None:
    if case == "bombs":
        bodies = [gzip_bomb(65 * MiB)] * 16
    else:
        count = 1 if case == "one" else 4
        bodies = [
            gzip.compress(invalid_records(records_mib * MiB, f"{case}{n}"), 6) for n in range(count)
        ]
    with (
        tempfile.TemporaryDirectory(prefix="cachewatch-memory-") as tmp,
        server(Path(tmp)) as (
            url,
            token,
            pid,
        ),
    ):
        warm = gzip.compress(invalid_records(256 * 1024, "warm"))
        post_in_parallel(url, token, [warm])
        before = peak_rss(pid)
        started = time.perf_counter()
        finals, busy = post_in_parallel(url, token, bodies)
        elapsed = time.perf_counter() - started
        after = peak_rss(pid)
    sizes = ", ".join(sorted({f"{len(b) / MiB:.2f} MiB" for b in bodies}))
    print(
        f"{case:<5} {len(bodies):>2} x {sizes} gzip: answers {dict(finals)}, {busy} x 503 "
        f"retried; {elapsed:5.1f} s; peak RSS {before / MiB:,.0f} -> {after / MiB:,.0f} MiB "
        f"(+{(after - before) / MiB:,.0f} MiB)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--case", choices=["one", "four", "bombs"], action="append")
    parser.add_argument("--records-mib", type=int, default=64, help="inflated size of a body")
    args = parser.parse_args()
    for case in args.case or ["one", "four", "bombs"]:
        measure(case, args.records_mib)


if __name__ == "__main__":
    main()
