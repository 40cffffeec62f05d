"""A retention run deleting a large set of old records while a shipper keeps posting:
every batch is answered 200 well within its timeout (retention deletes in short
transactions and never holds the write lock for long), and only the old, analysed
records go."""

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest
from sqlalchemy import Engine, func, select

from service import migrate
from service.db import make_engine, make_sessionmaker
from service.models import Rollup, UsageRecord
from service.services import analytics_pass
from service.settings import Settings
from tests.conftest import (
    PROJECT_ROOT,
    LiveServer,
    drop_database,
    fresh_database_url,
    make_live_server,
)
from tests.simulated import load_records

OLD = 100_000
DAY_S = 86_400
POST_TIMEOUT_S = 10.0  # what a shipper would allow; answers must come far sooner
SLOWEST_ALLOWED_S = 5.0


@pytest.fixture
def server_and_engine(tmp_path: Path, database_url: str) -> Iterator[tuple[LiveServer, Engine]]:
    url = fresh_database_url(tmp_path, "retention")
    engine = make_engine(Settings(database_url=url))
    migrate.upgrade(engine)
    server = make_live_server(tmp_path, url, run_jobs="false")
    server.start()
    yield server, engine
    server.stop()
    engine.dispose()
    drop_database(url)


def old_and_recent(now_s: float) -> list[dict[str, object]]:
    start = now_s - 45 * DAY_S
    rows: list[dict[str, object]] = [
        {
            "request_id": f"old-{i}",
            "ts": start + i * 5,  # about 6 days of traffic, all over 30 days old
            "service": "assistant",
            "model": "m",
            "prompt_tokens": 1000,
            "cached_tokens": 400,
            "block_size": 64,
            "block_hashes": [1, 2, i % 50],
        }
        for i in range(OLD)
    ]
    rows += [{**rows[0], "request_id": f"recent-{i}", "ts": now_s - 60 + i} for i in range(10)]
    return rows


def body(batch: int) -> bytes:
    now = time.time()
    return b"\n".join(
        orjson.dumps(
            {
                "request_id": f"live-{batch}-{i}",
                "ts": now,
                "service": "assistant",
                "model": "m",
                "prompt_tokens": 10,
            }
        )
        for i in range(1000)
    )


@pytest.mark.slow
def test_ingestion_keeps_answering_while_retention_deletes(
    server_and_engine: tuple[LiveServer, Engine],
) -> None:
    server, engine = server_and_engine
    settings = Settings(database_url=server.database_url)
    factory = make_sessionmaker(engine)
    with factory.begin() as session:
        load_records(session, old_and_recent(time.time()), [], batch=20_000)
    with factory.begin() as session:
        analytics_pass.catch_up(session, settings)

    token = server.token("ingest")
    stop = threading.Event()
    posts: list[tuple[float, float, int]] = []  # (started, seconds, status)

    def shipper() -> None:
        headers = {"Authorization": f"Bearer {token}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=POST_TIMEOUT_S) as client:
            batch = 0
            while not stop.is_set():
                started = time.monotonic()
                status = client.post("/v1/usage", content=body(batch)).status_code
                posts.append((started, time.monotonic() - started, status))
                batch += 1

    thread = threading.Thread(target=shipper, daemon=True)
    thread.start()
    time.sleep(0.5)
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", "retention", "--json"],
        env=server.env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        timeout=300,
    )
    ended = time.monotonic()
    time.sleep(0.5)
    stop.set()
    thread.join(POST_TIMEOUT_S + 5)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    report = orjson.loads(done.stdout)

    assert report["usage_deleted"] == OLD
    assert report["batches"] >= OLD // 5000
    statuses = {status for _, _, status in posts}
    assert statuses == {200}, statuses
    slowest = max(seconds for _, seconds, _ in posts)
    assert slowest < SLOWEST_ALLOWED_S, f"a batch took {slowest:.1f}s"
    during = [p for p in posts if began <= p[0] and p[0] + p[1] <= ended]
    assert len(during) >= 3, f"only {len(during)} batches answered during the retention run"
    with engine.connect() as conn:
        stored = conn.scalar(select(func.count()).select_from(UsageRecord))
        old_left = conn.scalar(select(func.count()).where(UsageRecord.request_id.like("old-%")))
        rolled = conn.scalar(select(func.sum(Rollup.requests)).where(Rollup.grain_s == 60))
    print(
        f"retention: {report['usage_deleted']} records in {report['batches']} batches, "
        f"{ended - began:.1f}s; {len(during)} ingest batches answered meanwhile, "
        f"slowest {slowest:.2f}s"
    )
    assert old_left == 0
    assert stored == 10 + 1000 * len(posts)
    assert rolled == OLD + 10  # the rollups still count the deleted records
