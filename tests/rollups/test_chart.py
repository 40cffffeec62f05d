"""Chart rollups (every grain, every filter scope) and the series path over them:
incremental passes with late records equal one full pass, and every answer equals
re-bucketing the per-(service, model, deploy, replica) minute rollups."""

import itertools
import math
import random
from typing import Any

import orjson
import polars as pl
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from service import repository
from service.analytics.definitions import SUM_COLUMNS
from service.models import (
    AnalyticsCursor,
    AnalyticsState,
    ChartRollup,
    GroupRollup,
    PrefixRollup,
    Rollup,
)
from service.repository.series import CHART_COLUMNS, CHART_TABLE, Segment
from service.rollups import chart, groups, histogram
from service.services import analytics_pass, series
from service.settings import Settings
from tests.rollups.helpers import ttft_percentiles

T0 = 1_764_457_200  # 2025-11-29T23:00:00Z: the data crosses midnight
US = 1_000_000


def records(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        prefix = rng.randrange(5)
        blocks = [prefix, 100 + prefix * 10 + rng.randrange(3), 1000 + i]
        out.append(
            {
                "request_id": f"c{seed}-{i}",
                "ts": T0 + rng.uniform(0, 3 * 3600),
                "service": rng.choice(["a", "b", "c"]),
                "model": rng.choice(["m", "m2"]),
                "prompt_tokens": 300,
                "cached_tokens": rng.choice([0, 100, 200]),
                "block_size": 100,
                "block_hashes": blocks,
                "replica": rng.choice(["r1", "r2", "r3", None]),
                "deploy": rng.choice(["v1", "v2"]),
                "ttft_ms": rng.choice([None, rng.uniform(20, 900)]),
                "session_id": f"s{rng.randrange(30)}",
                "scenario": rng.choice(["chat", "summary", None]),
                "tenant": rng.choice([f"t{rng.randrange(8)}", None]),
            }
        )
    return out


def post(client: TestClient, headers: dict[str, str], rows: list[dict[str, Any]]) -> None:
    body = b"\n".join(orjson.dumps({k: v for k, v in r.items() if v is not None}) for r in rows)
    answer = client.post("/v1/usage", content=body, headers=headers)
    assert answer.status_code == 200 and answer.json()["rejected"] == 0, answer.text


def chart_rows(session: Session) -> list[tuple[Any, ...]]:
    columns = [CHART_TABLE.c[c] for c in CHART_COLUMNS]
    return sorted(tuple(r) for r in session.execute(select(*columns)).all())


def prefix_rows(session: Session) -> list[tuple[Any, ...]]:
    table = repository.PREFIX_TABLE
    columns = [table.c[c] for c in repository.PREFIX_VALUE_COLUMNS]
    return sorted(tuple(r) for r in session.execute(select(*columns)).all())


def test_incremental_passes_with_late_records_equal_one_full_pass(
    client: TestClient, ingest_headers: dict[str, str], session: Session, settings: Settings
) -> None:
    # Groups too, capped at the 3 busiest tenants of each hour.
    settings = settings.model_copy(update={"group_values_kept": 3})
    rows = records(600, seed=3)
    random.Random(4).shuffle(rows)  # arrival order unrelated to ts: many late records
    for start in range(0, len(rows), 53):
        post(client, ingest_headers, rows[start : start + 53])
        analytics_pass.catch_up(session, settings)
    incremental = chart_rows(session)
    prefixes = prefix_rows(session)
    assert {r[0] for r in prefixes} == {60, 3600, 86_400}
    grains = {r[0] for r in incremental}
    assert grains == set(chart.GRAINS_S)
    assert {r[1] for r in incremental} == {0, 1, 2, 3}
    assert len({r[6] for r in incremental if r[0] == 86_400}) == 2  # both days
    tenants: dict[tuple[Any, ...], set[str]] = {}
    for r in incremental:
        if r[0] == 3600 and r[1] == 0 and r[4] == "tenant":
            tenants.setdefault((r[2], r[3], r[6]), set()).add(r[5])
    # Every hour, the open one too, keeps 3 tenants and the rest as one value.
    assert max(len(v) for v in tenants.values()) == 4
    assert all(groups.OTHER in v for v in tenants.values() if len(v) == 4)

    # Forget every result and compute everything again in one pass.
    for model in (Rollup, PrefixRollup, ChartRollup, GroupRollup, AnalyticsState, AnalyticsCursor):
        session.execute(delete(model))
    analytics_pass.catch_up(session, settings)
    assert chart_rows(session) == incremental
    assert prefix_rows(session) == prefixes


def test_first_pass_after_the_upgrade_builds_them_from_the_rollups(
    client: TestClient, ingest_headers: dict[str, str], session: Session, settings: Settings
) -> None:
    post(client, ingest_headers, records(300, seed=6))
    analytics_pass.catch_up(session, settings)
    built, prefixes = chart_rows(session), prefix_rows(session)
    # As right after the migration: rollups and minute/hour prefix rows only.
    session.execute(delete(ChartRollup))
    session.execute(delete(PrefixRollup).where(PrefixRollup.grain_s == 86_400))
    session.execute(delete(AnalyticsCursor).where(AnalyticsCursor.name == "chart_rollups"))
    analytics_pass.catch_up(session, settings)
    assert chart_rows(session) == built
    assert prefix_rows(session) == prefixes


def _reference(
    session: Session, query: series.SeriesQuery, total: bool = False
) -> list[dict[str, Any]]:
    """What the series path must give, from the minute `rollups` and `prefix_rollups`
    rows (the pre-chart-rollup algorithm): minutes starting in [from, to); `total`:
    one bucket of everything."""
    low = None if query.from_us is None else -(-query.from_us // 60_000_000) * 60_000_000
    high = None if query.to_us is None else -(-query.to_us // 60_000_000) * 60_000_000
    filters = repository.RollupFilter(query.service, query.model, low, high)
    rows = repository.fetch_rollups(session, 60, filters)
    prefixes = repository.fetch_prefix_keys(session, 60, filters)
    bucket_us = query.bucket_s * US
    out = pl.lit(0) if total else (pl.col("bucket_us") // bucket_us) * bucket_us
    rows, prefixes = rows.with_columns(out.alias("out")), prefixes.with_columns(out.alias("out"))
    sums = rows.group_by("out").agg(
        pl.col(SUM_COLUMNS).sum(),
        pl.col("replica").filter(pl.col("replica") != "").n_unique().alias("replicas"),
    )
    distinct = dict(prefixes.group_by("out").agg(pl.col("first_key").n_unique()).iter_rows())
    ttft = ttft_percentiles(rows, "out")
    return [
        series.metric_values(r, r["replicas"], distinct.get(r["out"], 0), ttft.get(r["out"], {}))
        for r in sums.sort("out").iter_rows(named=True)
    ]


@pytest.mark.parametrize("bucket_s", [60, 300, 420, 3600, 5400, 86_400])
@pytest.mark.parametrize(
    ("service", "model"), [(None, None), ("a", None), (None, "m"), ("b", "m2")]
)
def test_series_equals_rebucketed_minute_rollups(
    client: TestClient,
    ingest_headers: dict[str, str],
    session: Session,
    settings: Settings,
    bucket_s: int,
    service: str | None,
    model: str | None,
) -> None:
    post(client, ingest_headers, records(500, seed=5))
    analytics_pass.catch_up(session, settings)
    ranges = [(None, None), ((T0 + 1234) * US + 17, (T0 + 9000) * US), (T0 * US, (T0 + 3600) * US)]
    for from_us, to_us in ranges:
        query = series.SeriesQuery(service, model, from_us, to_us, bucket_s)
        answer = series.series(session, query)
        expected = _reference(session, query)
        assert len(answer.buckets) == len(expected) > 0
        for got, want in zip(answer.buckets, expected, strict=True):
            got = {k: v for k, v in got.items() if k != "ts"}
            assert got == want or _close(got, want), (query, got, want)
        (want,) = _reference(session, query, total=True)
        assert answer.totals == want or _close(answer.totals, want), (query, answer.totals)


def _close(got: Any, want: Any) -> bool:
    if isinstance(want, dict):
        return all(_close(got[k], v) for k, v in want.items())
    if isinstance(want, float):
        return math.isclose(got, want, rel_tol=1e-12)
    return bool(got == want)


def test_plan_covers_the_range_with_the_coarsest_dividing_grains() -> None:
    day, hour, minute = 86_400 * US, 3600 * US, 60 * US
    lo, hi = 3 * day - 7 * minute, 40 * day + 5 * hour + 13 * minute
    for bucket_s in (60, 300, 900, 3600, 7200, 86_400, 420):
        segments = series.plan(lo, hi, bucket_s)
        assert segments[0].from_us == lo and segments[-1].to_us == hi
        for before, after in itertools.pairwise(segments):
            assert before.to_us == after.from_us
        for s in segments:
            assert bucket_s % s.grain_s == 0
            assert s.from_us % (s.grain_s * US) == 0 and s.to_us % (s.grain_s * US) == 0
        assert len(segments) <= 7
    assert Segment(86_400, 3 * day, 40 * day) in series.plan(lo, hi, 86_400)


def test_group_percentiles_sorted_equals_dense(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(2)
    blobs = []
    for _ in range(50):
        bins = sorted(rng.sample(range(0, 3000), 8))
        blobs.append(histogram.encode(bins, [rng.randrange(1, 9) for _ in bins]))
    group = pl.Series([rng.randrange(7) for _ in blobs]).to_numpy().astype("int64")
    lengths = pl.Series([len(b) // histogram.PAIR_BYTES for b in blobs]).to_numpy()
    flat = b"".join(blobs)
    dense = histogram.group_percentiles(group, lengths, flat, 7)
    monkeypatch.setattr(histogram, "_dense", lambda groups, width, pairs: False)
    sorted_ = histogram.group_percentiles(group, lengths, flat, 7)
    assert (dense[1] == sorted_[1]).all()
    assert (dense[0][dense[1]] == sorted_[0][sorted_[1]]).all()
