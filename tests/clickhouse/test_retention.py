"""Retention on a ClickHouse deployment drops whole days, and, as on the relational
one (tests/services/test_retention.py), never a record the analytics pass has not
counted: a day holding one record above the pass's cursor stays until a pass has
read it. In the engine in-process and on Debian's 18.16 server."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import polars as pl
import pytest
from sqlalchemy.orm import Session, sessionmaker

from service import migrate, repository
from service.clickhouse import clickhouse_for
from service.clickhouse.client import ClickHouse
from service.db import make_engine, make_sessionmaker
from service.services import analytics_pass
from service.services.ingestion import ingest_usage
from service.services.retention import purge
from service.settings import Settings
from service.timeunits import DAY_US, HOUR_US
from tests.conftest import drop_database, fresh_database_url

NOW_US = (time.time_ns() // 1000 // DAY_US) * DAY_US + 12 * HOUR_US  # noon UTC today


@pytest.fixture(params=["chdb", "server"])
def deployment(
    request: pytest.FixtureRequest, tmp_path: Path, settings: Settings, chdb_url: str
) -> Iterator[tuple[Settings, sessionmaker[Session], ClickHouse]]:
    """A ClickHouse deployment (its own relational database) keeping 30 days."""
    if request.param == "chdb":
        ch_url = chdb_url
    else:
        ch_url = f"{request.getfixturevalue('clickhouse_server')}t_{uuid.uuid4().hex[:12]}"
    url = fresh_database_url(tmp_path, "retention")
    ch_settings = settings.model_copy(
        update={"database_url": url, "clickhouse_url": ch_url, "retention_days": 30}
    )
    engine = make_engine(ch_settings)
    migrate.upgrade(engine)
    ch = clickhouse_for(ch_settings)
    assert ch is not None
    yield ch_settings, make_sessionmaker(engine, ch), ch
    ch.command(f"DROP DATABASE IF EXISTS {ch.database}")
    engine.dispose()
    drop_database(url)


def records(prefix: str, start_us: int, count: int) -> list[dict[str, Any]]:
    """`count` records a minute apart from `start_us` (all within one day)."""
    return [
        {
            "request_id": f"{prefix}-{i}",
            "ts": (start_us + i * 60_000_000) / 1e6,
            "service": "assistant",
            "model": "m",
            "prompt_tokens": 1000,
            "cached_tokens": 500,
            "block_size": 64,
            "block_hashes": [7, 8, i % 5],
        }
        for i in range(count)
    ]


def store(factory: sessionmaker[Session], rows: list[dict[str, Any]]) -> None:
    with factory.begin() as session:
        body = b"\n".join(orjson.dumps(r) for r in rows)
        outcome = ingest_usage(
            session, body, content_encoding=None, max_decompressed_bytes=1 << 26,
            received_us=time.time_ns() // 1000,
        )  # fmt: skip
        assert outcome.accepted == len(rows)


def counted_up_to_here(factory: sessionmaker[Session], ch: ClickHouse) -> None:
    """The analytics pass's progress as retention reads it: every record stored so
    far consumed (its cursor), the newest ts seen. Set directly: what is under test
    is retention's reading of the cursor, not the pass."""
    frame = ch.query(
        "SELECT max(id) AS id, max(ts_us) AS ts FROM usage_records",
        {"id": pl.Int64(), "ts": pl.Int64()},
    )
    with factory.begin() as session:
        repository.set_cursor(session, analytics_pass.CURSOR, int(frame["id"][0]), NOW_US)
        repository.put_state(session, analytics_pass.STATE, int(frame["ts"][0]), b"")


def stored(ch: ClickHouse) -> dict[str, int]:
    """Stored records per request_id prefix."""
    frame = ch.query("SELECT request_id FROM usage_records FINAL", {"request_id": pl.String()})
    prefixes = frame["request_id"].str.split("-").list.first().value_counts()
    return dict(zip(prefixes["request_id"].to_list(), prefixes["count"].to_list(), strict=True))


def test_a_day_with_records_the_pass_has_not_read_is_kept(
    deployment: tuple[Settings, sessionmaker[Session], ClickHouse],
) -> None:
    settings, factory, ch = deployment
    store(factory, records("counted40", NOW_US - 40 * DAY_US, 6))
    store(factory, records("counted42", NOW_US - 42 * DAY_US, 4))
    store(factory, records("recent", NOW_US - HOUR_US, 3))
    counted_up_to_here(factory, ch)
    # History replayed into old days after the pass: nobody has counted these.
    store(factory, records("replayed40", NOW_US - 40 * DAY_US + HOUR_US, 2))
    store(factory, records("replayed44", NOW_US - 44 * DAY_US, 5))

    report = purge(factory, settings, NOW_US)
    assert report.usage_deleted == 4  # day -42 only: counted whole
    assert stored(ch) == {"counted40": 6, "replayed40": 2, "replayed44": 5, "recent": 3}

    counted_up_to_here(factory, ch)  # a pass has read them: their days may go
    assert purge(factory, settings, NOW_US).usage_deleted == 13
    assert stored(ch) == {"recent": 3}
    assert purge(factory, settings, NOW_US).usage_deleted == 0


def test_a_day_newer_than_the_cutoff_is_kept(
    deployment: tuple[Settings, sessionmaker[Session], ClickHouse],
) -> None:
    """The day of the cutoff itself holds records after it: not dropped."""
    settings, factory, ch = deployment
    store(factory, records("old", NOW_US - 31 * DAY_US, 2))
    store(factory, records("edge", NOW_US - 30 * DAY_US - 11 * HOUR_US, 2))
    store(factory, records("recent", NOW_US - HOUR_US, 1))
    counted_up_to_here(factory, ch)
    assert purge(factory, settings, NOW_US).usage_deleted == 2
    assert stored(ch) == {"edge": 2, "recent": 1}
