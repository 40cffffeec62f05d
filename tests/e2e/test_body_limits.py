"""Body limits against a real server: over 10 MiB as sent or 64 MiB decompressed is
413 without the server's memory following the attacker, and a body exactly at
either limit is accepted."""

import gzip
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, func, select

from service.models import UsageRecord
from tests.conftest import LiveServer, drop_database, fresh_database_url, make_live_server
from tests.e2e.bodies import MAX_BODY, MAX_DECOMPRESSED, Memory, MiB, gzip_bomb, record_line

MEMORY_BUDGET = 100 * MiB


def records_of_exact_size(size: int, prefix: str) -> tuple[bytes, int]:
    """NDJSON of whole records, its last line padded with spaces (legal JSON
    whitespace) to exactly `size` bytes; returns it and its record count."""
    lines: list[bytes] = []
    total = 0
    while True:
        line = record_line(len(lines), prefix) + b"\n"
        if total + len(line) > size - 64:
            break
        lines.append(line)
        total += len(line)
    lines[-1] = lines[-1][:-1] + b" " * (size - total) + b"\n"
    body = b"".join(lines)
    assert len(body) == size
    return body, len(lines)


def padded_records(size: int, count: int, prefix: str) -> bytes:
    """`count` records, each followed by whitespace on its line, `size` bytes in all:
    a body that inflates to the limit without a million records to validate."""
    lines = [record_line(i, prefix) for i in range(count)]
    room = size - sum(len(line) + 1 for line in lines)
    pads = [room // count + (1 if i < room % count else 0) for i in range(count)]
    body = b"".join(line + b" " * pad + b"\n" for line, pad in zip(lines, pads, strict=True))
    assert len(body) == size
    return body


@pytest.fixture
def live_server(tmp_path: Path, database_url: str) -> Iterator[LiveServer]:
    """A live server on a fresh database of the backend under test, its background
    jobs off: the memory measured is the requests', not an analytics pass's."""
    url = fresh_database_url(tmp_path, "limits")
    server = make_live_server(tmp_path, url, run_jobs="false")
    server.start()
    yield server
    server.stop()
    drop_database(url)


@pytest.fixture
def client(live_server: LiveServer) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {live_server.token('ingest')}"}
    with httpx.Client(base_url=live_server.url, headers=headers, timeout=120) as client:
        yield client


def stored(live_server: LiveServer) -> int:
    engine = create_engine(live_server.database_url)
    try:
        with engine.connect() as conn:
            return conn.scalar(select(func.count()).select_from(UsageRecord)) or 0
    finally:
        engine.dispose()


def test_oversized_and_bomb_bodies_are_413_without_memory_growth(
    live_server: LiveServer, client: httpx.Client
) -> None:
    assert live_server.process is not None
    memory = Memory(live_server.process.pid)
    # Warm up both paths (imports, pools, first allocations) before the baseline.
    warm = b"".join(record_line(i, "warm") + b"\n" for i in range(100))
    assert client.post("/v1/usage", content=warm).status_code == 200
    gz = gzip.compress(b"".join(record_line(i, "warmgz") + b"\n" for i in range(100)))
    assert client.post("/v1/usage", content=gz, headers={"Content-Encoding": "gzip"}).is_success
    rss_before, peak_before = memory.rss(), memory.peak()

    eleven = b"x" * (11 * MiB)
    declared = client.post("/v1/usage", content=eleven)
    assert declared.status_code == 413, declared.text

    def chunks() -> Iterator[bytes]:
        # No Content-Length (chunked): the server must count while it reads.
        for start in range(0, len(eleven), MiB):
            yield eleven[start : start + MiB]

    streamed = client.post("/v1/usage", content=chunks())
    assert streamed.status_code == 413, streamed.text

    bomb = gzip_bomb(300 * MiB)
    assert len(bomb) < MiB, len(bomb)
    for headers in ({"Content-Encoding": "gzip"}, {}):  # declared, and sniffed by magic
        answer = client.post("/v1/usage", content=bomb, headers=headers)
        assert answer.status_code == 413, answer.text

    rss_growth, peak_growth = memory.rss() - rss_before, memory.peak() - peak_before
    assert rss_growth < MEMORY_BUDGET, f"RSS grew by {rss_growth / MiB:.0f} MiB"
    assert peak_growth < MEMORY_BUDGET, f"peak RSS grew by {peak_growth / MiB:.0f} MiB"
    # The server is fine afterwards and stored nothing from the refused bodies.
    assert client.get("/healthz").status_code == 200
    assert stored(live_server) == 200


def test_bodies_at_the_limits_are_accepted_one_byte_more_is_413(
    live_server: LiveServer, client: httpx.Client
) -> None:
    body, count = records_of_exact_size(MAX_BODY, "plain")
    answer = client.post("/v1/usage", content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 200, answer.text[:500]
    assert answer.json() == {"accepted": count, "duplicates": 0, "rejected": 0, "errors": []}
    assert client.post("/v1/usage", content=body + b" ").status_code == 413

    inflated = padded_records(MAX_DECOMPRESSED, 1000, "gz")
    compressed = gzip.compress(inflated, compresslevel=6)
    assert len(compressed) < MAX_BODY
    answer = client.post("/v1/usage", content=compressed, headers={"Content-Encoding": "gzip"})
    assert answer.status_code == 200, answer.text[:500]
    assert answer.json() == {"accepted": 1000, "duplicates": 0, "rejected": 0, "errors": []}
    over = gzip.compress(inflated + b" ", compresslevel=6)
    answer = client.post("/v1/usage", content=over, headers={"Content-Encoding": "gzip"})
    assert answer.status_code == 413, answer.text[:500]

    assert stored(live_server) == count + 1000
