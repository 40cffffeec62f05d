"""Hostile and heavy request bodies, and the memory of the server they are sent to:
shared by the body tests (tests/e2e/test_body_limits.py, test_body_memory.py) and
bench/body_memory.py, so that the bench prints what the tests bound."""

import contextlib
import threading
import zlib
from pathlib import Path

import httpx
import orjson
import psutil

MiB = 1024 * 1024
MAX_BODY = 10 * MiB  # contract defaults (CACHEWATCH_MAX_BODY_BYTES and the 64 MiB)
MAX_DECOMPRESSED = 64 * MiB


def record_line(i: int, prefix: str) -> bytes:
    """A valid record of usual shape (16 block hashes), its request_id from `prefix`."""
    return orjson.dumps(
        {
            "request_id": f"{prefix}-{i:07d}",
            "ts": 1_714_564_800_000 + i,  # epoch milliseconds
            "service": "assistant",
            "model": "m",
            "prompt_tokens": 8192,
            "cached_tokens": 4096,
            "block_size": 512,
            "block_hashes": list(range(i, i + 16)),
        }
    )


def gzip_bomb(inflated: int) -> bytes:
    """A few hundred KiB of gzip that inflates to `inflated` bytes of spaces,
    built piece by piece so the test itself never holds the inflated body."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    piece = b" " * MiB
    parts = [compressor.compress(piece) for _ in range(inflated // MiB)]
    parts.append(compressor.flush())
    return b"".join(parts)


def invalid_records(size: int) -> tuple[bytes, int]:
    """NDJSON records a shipper could send, each invalid in a way only pydantic's
    model check explains (more cached tokens than prompt tokens): every line goes
    through the per-line path and is kept verbatim. At most `size` bytes."""
    lines: list[bytes] = []
    total = 0
    while True:
        i = len(lines)
        line = orjson.dumps(
            {
                "request_id": f"bad-{i:09d}",
                "ts": 1_714_564_800 + i // 100,
                "service": "assistant",
                "model": "llama-3-70b",
                "prompt_tokens": 100,
                "cached_tokens": 200,
                "replica": f"pod-{i % 8}",
                "block_size": 512,
                "block_hashes": list(range(i, i + 16)),
            }
        )
        if total + len(line) + 1 > size:
            return b"\n".join(lines) + b"\n", len(lines)
        lines.append(line)
        total += len(line) + 1


class Memory:
    """The server process's resident memory: now, and its peak (VmHWM), which also
    catches a spike that was freed again before we looked."""

    def __init__(self, pid: int) -> None:
        self.process = psutil.Process(pid)
        self.status = Path(f"/proc/{pid}/status")

    def rss(self) -> int:
        return int(self.process.memory_info().rss)

    def peak(self) -> int:
        if not self.status.exists():  # not Linux: the current RSS is all we have
            return self.rss()
        for line in self.status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
        return self.rss()

    def reset(self) -> int:
        """Start measuring the peak afresh (Linux clears VmHWM on "5" to clear_refs);
        returns the RSS it starts from."""
        with contextlib.suppress(OSError):  # else growth is measured from the peak so far
            Path(f"/proc/{self.process.pid}/clear_refs").write_text("5")
        return max(self.rss(), self.peak())


def post_until_through(
    url: str, token: str, bodies: list[bytes]
) -> tuple[list[httpx.Response], list[httpx.Response]]:
    """Each body (gzip) to `POST /v1/usage` from its own thread at once, retried
    after Retry-After while the answer is 503: the final answers, and the 503s on
    the way."""
    finals: list[httpx.Response] = []
    busy: list[httpx.Response] = []
    lock = threading.Lock()
    headers = {"Authorization": f"Bearer {token}", "Content-Encoding": "gzip"}

    def send(body: bytes) -> None:
        with httpx.Client(base_url=url, headers=headers, timeout=300) as client:
            for _ in range(200):
                answer = client.post("/v1/usage", content=body)
                if answer.status_code != 503:
                    break
                with lock:
                    busy.append(answer)
                threading.Event().wait(float(answer.headers["Retry-After"]))
        with lock:
            finals.append(answer)

    threads = [threading.Thread(target=send, args=(body,)) for body in bodies]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return finals, busy
