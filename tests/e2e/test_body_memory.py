"""Memory of hostile bodies against a real server (the memory budget of
service/ingest/inflight.py): what one body of invalid records, parallel ones, and
parallel gzip bombs add to the server's peak RSS, and that requests past the budget
are answered 503 with Retry-After and go through when retried. `bench/body_memory.py`
prints the same three growths, on this code or any other (the closing note of issue
22 has them before and after the budget)."""

import gzip
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, func, select

from service.models import RejectedRecord
from service.services.rejected import DEFAULT_LIMITS
from tests.conftest import LiveServer, drop_database, fresh_database_url, make_live_server
from tests.e2e.bodies import (
    MAX_BODY,
    MAX_DECOMPRESSED,
    Memory,
    MiB,
    gzip_bomb,
    invalid_records,
    post_until_through,
)

RETRY_AFTER_S = 1


@pytest.fixture(scope="module")
def invalid_body() -> tuple[bytes, int]:
    """Gzip inflating to just under the 64 MiB limit, under the 10 MiB one as sent."""
    inflated, count = invalid_records(MAX_DECOMPRESSED)
    body = gzip.compress(inflated, 6)
    assert len(body) < MAX_BODY and len(inflated) > MAX_DECOMPRESSED - MiB
    return body, count


@pytest.fixture
def live_server(tmp_path: Path, database_url: str) -> Iterator[LiveServer]:
    """Background jobs off (the memory measured is the requests'), a short
    Retry-After so that retried requests do not wait long, default limits."""
    url = fresh_database_url(tmp_path, "memory")
    server = make_live_server(tmp_path, url, run_jobs="false", retry_after_s=str(RETRY_AFTER_S))
    server.start()
    yield server
    server.stop()
    drop_database(url)


@pytest.fixture
def memory(live_server: LiveServer) -> Memory:
    """The server's memory, measured after a warm-up of both decoding paths."""
    assert live_server.process is not None
    warm, _ = invalid_records(MiB)
    headers = {"Authorization": f"Bearer {live_server.token('ingest')}"}
    for body, encoding in ((warm, {}), (gzip.compress(warm), {"Content-Encoding": "gzip"})):
        answer = httpx.post(
            f"{live_server.url}/v1/usage", content=body, headers={**headers, **encoding}
        )
        assert answer.status_code == 200, answer.text[:300]
    return Memory(live_server.process.pid)


# The most rows one body keeps of its rejected records: samples and count rows.
KEPT_PER_BODY = DEFAULT_LIMITS.reasons_per_body * (DEFAULT_LIMITS.sample_per_reason + 1) + 1


def rejected_stored(server: LiveServer) -> int:
    engine = create_engine(server.database_url)
    try:
        with engine.connect() as conn:
            return conn.scalar(select(func.count()).select_from(RejectedRecord)) or 0
    finally:
        engine.dispose()


def test_a_body_of_64_mib_of_invalid_records_holds_a_bounded_memory(
    live_server: LiveServer, memory: Memory, invalid_body: tuple[bytes, int]
) -> None:
    body, count = invalid_body
    kept_before = rejected_stored(live_server)
    start = memory.reset()
    finals, busy = post_until_through(live_server.url, live_server.token("ingest"), [body])
    growth = memory.peak() - start

    assert [a.status_code for a in finals] == [200] and not busy, finals[0].text[:300]
    assert finals[0].json()["rejected"] == count
    assert growth < 300 * MiB, f"peak RSS grew by {growth / MiB:.0f} MiB"
    # A sample of each reason and a row counting the rest (docs/ingestion.md).
    assert 0 < rejected_stored(live_server) - kept_before <= KEPT_PER_BODY


def test_parallel_bodies_past_the_budget_are_503_and_go_through_when_retried(
    live_server: LiveServer, memory: Memory, invalid_body: tuple[bytes, int]
) -> None:
    """Four such bodies at once: each is charged about 714 MiB of the 1 GiB budget,
    so one at a time decodes; the others are told to come back, and do."""
    body, count = invalid_body
    kept_before = rejected_stored(live_server)
    start = memory.reset()
    finals, busy = post_until_through(live_server.url, live_server.token("ingest"), [body] * 4)
    growth = memory.peak() - start

    assert [a.status_code for a in finals] == [200] * 4, [a.text[:300] for a in finals]
    assert all(a.json()["rejected"] == count for a in finals)
    assert busy, "no request was answered 503: the budget did not hold any back"
    for answer in busy:
        assert answer.headers["Retry-After"] == str(RETRY_AFTER_S)
        assert "retry later" in answer.json()["error"]
    assert growth < 500 * MiB, f"peak RSS grew by {growth / MiB:.0f} MiB"
    kept = rejected_stored(live_server) - kept_before  # each body its sample, once
    assert kept % 4 == 0 and 0 < kept // 4 <= KEPT_PER_BODY


def test_parallel_gzip_bombs_are_413_holding_little(
    live_server: LiveServer, memory: Memory
) -> None:
    """A bomb's inflated bytes are counted, not kept: 16 of them at once are all
    refused with 413, none is ever held, so none has to wait for the budget."""
    bomb = gzip_bomb(MAX_DECOMPRESSED + MiB)
    assert len(bomb) < 100 * 1024
    start = memory.reset()
    finals, busy = post_until_through(live_server.url, live_server.token("ingest"), [bomb] * 16)
    growth = memory.peak() - start

    assert [a.status_code for a in finals] == [413] * 16, [a.text[:300] for a in finals]
    assert not busy
    assert growth < 150 * MiB, f"peak RSS grew by {growth / MiB:.0f} MiB"
    assert httpx.get(f"{live_server.url}/healthz").status_code == 200
