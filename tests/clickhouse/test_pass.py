"""A ClickHouse deployment against the relational one, through the services: the
same records stored by the ingestion service on both, the analytics passes run at
the same points (a first pass, then late records, duplicates and the rest), and
every rollup table the two leave is the same, row for row: each metric of contract
section 4's sums, every cause, the TTFT histograms, the prefix, segment, group and
chart rows. Then the reads that go to the records (detection's, the capacity
curve's) answer from ClickHouse."""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from service.models import (
    ChartRollup,
    DiagnosisRollup,
    GroupRollup,
    PrefixRollup,
    Rollup,
    SegmentRollup,
)
from service.repository import detection as detection_repo
from service.rollups import histogram
from service.services import capacity
from service.services.analytics_pass import catch_up
from service.services.clickhouse_pass import step_bounds
from service.services.ingestion import ingest_usage
from service.settings import Settings
from tests.clickhouse.conftest import deployment_of
from tests.services import findings_traffic, group_traffic
from tests.services.traffic import T0, US, traffic

TABLES = (Rollup, PrefixRollup, ChartRollup, SegmentRollup, GroupRollup, DiagnosisRollup)
#: Providers' own diagnoses, given to every 7th record in turn.
SAID = ("system_changed", "tools_changed", "messages_changed", "model_changed", "unavailable")


@pytest.fixture
def profiled(tmp_path: Path, settings: Settings) -> Settings:
    path = tmp_path / "models.toml"
    path.write_text(findings_traffic.MODELS_FILE)
    return settings.model_copy(update={"models_file": path})


@pytest.fixture(params=["chdb", "server"])
def clickhouse_url(request: pytest.FixtureRequest, chdb_url: str) -> str:
    """The engine in-process, and Debian's clickhouse-server (18.16) over HTTP."""
    if request.param == "chdb":
        return chdb_url
    server: str = request.getfixturevalue("clickhouse_server")
    return f"{server}t_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def clickhouse_sessions(
    tmp_path: Path, profiled: Settings, clickhouse_url: str
) -> Iterator[tuple[Settings, sessionmaker[Session]]]:
    """A second deployment: its own relational database, its records in ClickHouse."""
    with deployment_of(profiled, tmp_path, clickhouse_url, "clickhouse") as deployment:
        yield deployment


def records() -> list[dict[str, Any]]:
    """Every cause (routing, eviction, concurrent, unknown from the random traffic;
    expiry and below_minimum from the managed profiles), sessions with rewrites,
    segments, scenarios, tenants and deploy tags; providers' diagnoses on some."""
    out = traffic(500, seed=11, hours=3.0)
    out += findings_traffic.expiry()[:400]
    out += findings_traffic.below_minimum()[:300]
    out += findings_traffic.history_rewrite()[:300]
    out += group_traffic.traffic(group_traffic.Plan(hours=1.0, tenants=4, canary_at=1800))
    for i, record in enumerate(out[::7]):
        reason = {"type": SAID[i % len(SAID)], "cache_missed_input_tokens": i}
        record["diagnostics"] = {"cache_miss_reason": reason}
    return out


def ingest(session: Session, batch: list[dict[str, Any]]) -> tuple[int, int]:
    body = b"\n".join(orjson.dumps({k: v for k, v in r.items() if v is not None}) for r in batch)
    outcome = ingest_usage(
        session, body, content_encoding=None, max_decompressed_bytes=1 << 26,
        received_us=(T0 + 86_400) * US,
    )  # fmt: skip
    return outcome.accepted, outcome.duplicates


def table_rows(session: Session, model: type[Any]) -> list[tuple[Any, ...]]:
    table = model.__table__
    columns = [c for c in table.columns if c.name != "id"]
    rows = session.execute(select(*columns)).all()
    names = [c.name for c in columns]
    return sorted(
        (tuple(_comparable(n, v) for n, v in zip(names, row, strict=True)) for row in rows),
        key=repr,
    )


def _comparable(name: str, value: Any) -> Any:
    """Dollars are sums of floats in whatever order a group's rows came; a TTFT
    histogram's bins are in whatever order its rows were merged."""
    if name in ("ttft_hit", "ttft_miss") and value is not None:
        bins, counts = histogram.decode(value)
        return tuple(sorted(zip(bins.tolist(), counts.tolist(), strict=True)))
    if isinstance(value, float):
        return round(value, 9) if math.isfinite(value) else value
    return value


def test_same_rollups_as_the_relational_pass(
    session: Session,
    profiled: Settings,
    clickhouse_sessions: tuple[Settings, sessionmaker[Session]],
) -> None:
    ch_settings, ch_factory = clickhouse_sessions
    assert_same_rollups(session, profiled, ch_settings, ch_factory)


def test_in_steps_the_same_rollups(
    session: Session,
    profiled: Settings,
    clickhouse_sessions: tuple[Settings, sessionmaker[Session]],
) -> None:
    """Steps of a few hundred records (whole hours: some hours hold more, and are
    a step alone) give every rollup row one step gives."""
    ch_settings, ch_factory = clickhouse_sessions
    stepped = ch_settings.model_copy(update={"clickhouse_pass_step_records": 150})
    assert_same_rollups(session, profiled, stepped, ch_factory)


def test_step_bounds() -> None:
    hours = [0, 3600, 7200, 10800]
    assert step_bounds(hours, [5, 5, 5, 20], -7, 10) == [(-7, 7200), (7200, 10800), (10800, None)]
    assert step_bounds(hours, [5, 5, 5, 20], -7, 100) == [(-7, None)]
    assert step_bounds([], [], 9, 10) == [(9, None)]


def assert_same_rollups(
    session: Session,
    profiled: Settings,
    ch_settings: Settings,
    ch_factory: sessionmaker[Session],
) -> None:
    every = records()
    rng = random.Random(5)
    ordered = sorted(every, key=lambda r: r["ts"])
    third = len(ordered) // 3
    first, forward, rest = ordered[:third], ordered[third : 2 * third], ordered[2 * third :]
    again = rng.sample(first, 40)  # sent again: duplicates
    rng.shuffle(rest)
    late = rest[:30]  # sent after the records that follow them
    # A first pass; forward ones (every record after the watermark, looking back
    # W), the second with duplicates and in no order; then late records.
    batches = [first, forward, again + rest[30:], late]
    forward_pass = [None, True, True, False]
    with ch_factory() as ch_session:
        for batch, forward_expected in zip(batches, forward_pass, strict=True):
            assert ingest(session, batch) == ingest(ch_session, batch)
            ch_session.commit()
            report = catch_up(session, profiled)
            ch_report = catch_up(ch_session, ch_settings)
            ch_session.commit()
            assert ch_report.records == report.records
            forward = ch_report.recomputed_from_us is None
            assert forward == (report.recomputed_from_us is None)
            if forward_expected is not None:
                assert forward == forward_expected
        for model in TABLES:
            expected = table_rows(session, model)
            assert expected, model.__tablename__
            assert table_rows(ch_session, model) == expected, model.__tablename__


def test_reads_of_the_records(
    session: Session,
    profiled: Settings,
    clickhouse_sessions: tuple[Settings, sessionmaker[Session]],
) -> None:
    _, ch_factory = clickhouse_sessions
    batch = records()
    with ch_factory() as ch_session:
        ingest(session, batch)
        ingest(ch_session, batch)
        for s in (session, ch_session):
            s.flush()
        args = ("assistant", "m", "a")
        assert detection_repo.replica_first_ts(ch_session, *args, T0 * US) == (
            detection_repo.replica_first_ts(session, *args, T0 * US)
        )
        assert detection_repo.replica_last_ts(ch_session, *args, (T0 + 7200) * US) == (
            detection_repo.replica_last_ts(session, *args, (T0 + 7200) * US)
        )
        assert detection_repo.deploy_first_record(ch_session, "assistant", "v2", 0) == (
            detection_repo.deploy_first_record(session, "assistant", "v2", 0)
        )
        variants = ("assistant", "managed-sonnet", T0 * US, (T0 + 3 * 3600) * US)
        assert detection_repo.segment_variants_per_hour(ch_session, *variants) == (
            detection_repo.segment_variants_per_hour(session, *variants)
        )
        for group in (None, ("tenant", "tenant-1"), ("deploy", "v2")):
            window = ("assistant", "m", T0 * US, (T0 + 3 * 3600) * US, group)
            relational = sorted(zip(*detection_repo.session_sums(session, *window), strict=True))
            on_clickhouse = detection_repo.session_sums(ch_session, *window)
            assert sorted(zip(*on_clickhouse, strict=True)) == relational, group
            assert relational, group


def test_capacity_is_sampled_and_says_so(
    session: Session, clickhouse_sessions: tuple[Settings, sessionmaker[Session]]
) -> None:
    """At rate 1 the sample is every block: the exact curve; asked for 1%, a range
    this small is replayed whole all the same (services.capacity.MIN_SAMPLED_USES),
    and the answer says so, with its errors (tests/clickhouse/test_capacity.py)."""
    _, ch_factory = clickhouse_sessions
    batch = traffic(800, seed=3)
    sizes = [100, 300, 1000, 100_000]
    with ch_factory() as ch_session:
        ingest(session, batch)
        ingest(ch_session, batch)
        exact = capacity.capacity(session, model="m", from_us=None, to_us=None, sizes=sizes)
        full = capacity.capacity(
            ch_session, model="m", from_us=None, to_us=None, sizes=sizes, sample_rate=1.0
        )
        assert full.pop("sample")["rate"] == 1.0
        assert [p["hit_rate"] for p in full.pop("points")] == pytest.approx(
            [p["hit_rate"] for p in exact.pop("points")]
        )
        assert full.pop("ceiling") == pytest.approx(exact.pop("ceiling"))
        assert full == exact
        sampled = capacity.capacity(
            ch_session, model="m", from_us=None, to_us=None, sizes=sizes, sample_rate=0.01
        )
        assert sampled["sample"]["rate"] == 1.0
        assert sampled["sample"]["error"] == [0.0] * len(sizes)
