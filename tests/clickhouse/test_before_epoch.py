"""Records before 1970 (a negative `ts_us`) are counted by a ClickHouse deployment
as by the relational one (issue 33, defect 7): `1970-01-01T00:30:00+01:00` is
1969-12-31T23:30Z. On the engine in-process and on Debian's 18.16 server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from service.models import Rollup
from service.services.analytics_pass import catch_up
from service.services.ingestion import ingest_usage
from service.settings import Settings
from tests.clickhouse.conftest import deployment_of


@pytest.fixture(params=["chdb", "server"])
def ch_deployment(
    request: pytest.FixtureRequest, tmp_path: Path, settings: Settings, chdb_url: str
) -> Iterator[tuple[Settings, sessionmaker[Session]]]:
    """The settings and sessions of a deployment whose records are in ClickHouse."""
    clickhouse_url = chdb_url
    if request.param == "server":
        clickhouse_url = f"{request.getfixturevalue('clickhouse_server')}t_{uuid.uuid4().hex[:12]}"
    with deployment_of(settings, tmp_path, clickhouse_url, "before_epoch") as deployment:
        yield deployment


def record(request_id: str, ts: str, **extra: object) -> dict[str, object]:
    return {
        "request_id": request_id,
        "ts": ts,
        "service": "assistant",
        "model": "m",
        "prompt_tokens": 400,
        "cached_tokens": 100,
        "block_size": 100,
        "block_hashes": [1, 2, 3, 4],
        **extra,
    }


Counts = list[tuple[int, int, int, int, int]]


def counted(session: Session, settings: Settings, records: list[dict[str, object]]) -> Counts:
    """Ingest `records`, run a pass, and read back every rollup row's (grain,
    bucket, requests, prompt and cacheable tokens)."""
    body = b"\n".join(orjson.dumps(r) for r in records)
    outcome = ingest_usage(
        session, body, content_encoding=None, max_decompressed_bytes=1 << 20, received_us=10**15
    )
    assert outcome.accepted == len(records)
    session.commit()
    catch_up(session, settings)
    session.commit()
    columns = (Rollup.grain_s, Rollup.bucket_us, Rollup.requests, Rollup.prompt_tokens)
    rows = session.execute(select(*columns, Rollup.cacheable_tokens).order_by(*columns))
    return [tuple(row) for row in rows]  # type: ignore[misc]


BEFORE = record("before-epoch", "1970-01-01T00:30:00+01:00")
AFTER = record("after-epoch", "1970-01-01T02:00:00Z")
#: The record before 1970 alone; after one later record in the same pass; and
#: late, in a pass after the later record's.
CASES = {"alone": [[BEFORE]], "same-pass": [[AFTER, BEFORE]], "late": [[AFTER], [BEFORE]]}


@pytest.mark.parametrize("batches", CASES.values(), ids=CASES.keys())
def test_counted_as_the_relational_pass_counts_it(
    session: Session,
    settings: Settings,
    ch_deployment: tuple[Settings, sessionmaker[Session]],
    batches: list[list[dict[str, object]]],
) -> None:
    expected = [counted(session, settings, batch) for batch in batches]
    assert sum(row[2] for row in expected[-1] if row[0] == 3600) == sum(map(len, batches))
    assert min(row[1] for row in expected[-1]) < 0
    ch_settings, ch_factory = ch_deployment
    with ch_factory() as ch_session:
        assert [counted(ch_session, ch_settings, batch) for batch in batches] == expected


def test_counted_after_the_window_changes(
    session: Session, settings: Settings, ch_deployment: tuple[Settings, sessionmaker[Session]]
) -> None:
    """A changed W rebuilds everything on record: the record before 1970 too."""
    ch_settings, ch_factory = ch_deployment
    narrower = {"reuse_window_s": 1800.0}
    later = [record("later", "1970-01-01T03:00:00Z")]
    counted(session, settings, [AFTER, BEFORE])
    expected = counted(session, settings.model_copy(update=narrower), later)
    assert sum(row[2] for row in expected if row[0] == 3600) == 3
    with ch_factory() as ch_session:
        counted(ch_session, ch_settings, [AFTER, BEFORE])
        assert counted(ch_session, ch_settings.model_copy(update=narrower), later) == expected
