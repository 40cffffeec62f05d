"""Concurrent writers on one database, with real commits: overlapping batches store
each record once and the counts add up. On PostgreSQL this drives the direct COPY
into a conflict with a concurrent transaction (its fallback through ON CONFLICT)."""

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, sessionmaker

from service import migrate
from service.db import make_engine, make_sessionmaker
from service.ingest.fast import decode_line, record_values
from service.models import UsageRecord
from service.repository import insert_usage_values
from service.repository import usage as usage_repository
from service.services.ingestion import IngestOutcome, ingest_usage
from service.settings import Settings
from tests.conftest import drop_database, fresh_database_url, is_postgres_run

RECEIVED_US = 1_764_410_400_000_000  # 2025-11-29, after every record


def line(i: int) -> bytes:
    return orjson.dumps(
        {"request_id": f"w-{i}", "ts": 1_700_000_000 + i, "service": "s", "model": "m",
         "prompt_tokens": 100, "block_size": 16, "block_hashes": [i, i + 1]}
    )  # fmt: skip


def ingest(factory: sessionmaker[Session], ids: list[int]) -> IngestOutcome:
    with factory() as session:
        outcome = ingest_usage(
            session,
            b"\n".join(line(i) for i in ids),
            content_encoding=None,
            max_decompressed_bytes=1 << 26,
            received_us=RECEIVED_US,
        )
        session.commit()
    return outcome


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    url = fresh_database_url(tmp_path, "writers")
    engine = make_engine(Settings(database_url=url, sqlite_busy_timeout_ms=20_000))
    migrate.upgrade(engine)
    yield engine
    engine.dispose()
    drop_database(url)


def stored_ids(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.scalars(select(UsageRecord.request_id)))


def test_a_writer_racing_a_committing_writer_stores_the_rest_once(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    attempts: list[int | None] = []
    attempt = usage_repository._attempt

    def spy(cursor, copy):  # type: ignore[no-untyped-def]
        attempts.append(attempt(cursor, copy))
        return attempts[-1]

    monkeypatch.setattr(usage_repository, "_attempt", spy)
    factory = make_sessionmaker(engine)
    first = factory()
    rows = [record_values(decode_line(line(i)), RECEIVED_US) for i in range(100)]  # type: ignore[arg-type]
    assert insert_usage_values(first, rows) == 100  # not committed yet
    second: list[IngestOutcome] = []
    # 50..149 with 120 twice: its first COPY meets 50..99 uncommitted and waits.
    racer = threading.Thread(target=lambda: second.append(ingest(factory, [*range(50, 150), 120])))
    racer.start()
    time.sleep(1.0)
    assert racer.is_alive()  # waiting for the first writer
    first.commit()
    first.close()
    racer.join(30)
    assert second[0].accepted == 50 and second[0].duplicates == 51
    ids = stored_ids(engine)
    assert sorted(ids) == sorted(f"w-{i}" for i in range(150))
    if is_postgres_run():
        # The first writer's rows failed the first COPY; the second stored the rest.
        assert attempts[-2:] == [None, 50]


def test_concurrent_writers_with_overlapping_batches_store_each_record_once(
    engine: Engine,
) -> None:
    factory = make_sessionmaker(engine)
    rnd = random.Random(7)
    batches = [[rnd.randrange(3000) for _ in range(300)] for _ in range(24)]
    outcomes: list[IngestOutcome] = []
    lock = threading.Lock()

    def writer(mine: list[list[int]]) -> None:
        for ids in mine:
            outcome = ingest(factory, ids)
            with lock:
                outcomes.append(outcome)

    threads = [threading.Thread(target=writer, args=(batches[t::4],)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    distinct = {i for ids in batches for i in ids}
    assert sum(o.accepted for o in outcomes) == len(distinct)
    assert sum(o.accepted + o.duplicates for o in outcomes) == sum(map(len, batches))
    ids = stored_ids(engine)
    assert len(ids) == len(set(ids)) == len(distinct)
    with engine.connect() as conn:
        assert conn.scalar(select(func.count()).select_from(UsageRecord)) == len(distinct)
