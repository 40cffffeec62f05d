"""services.chart_rollups on the real database: the chart rows are the minute
`rollups` summed per bucket and filter scope at every grain; a rebuild from any
point gives the rows a full build gives and leaves the buckets before it alone;
`ensure_built` builds once per VERSION; the daily prefix rows restart from their
hours. (tests/rollups/test_chart.py checks the rows through the analytics pass and
the series path.)"""

import json
from collections import Counter, defaultdict
from typing import Any

import pytest
from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from service import repository
from service.models import AnalyticsCursor, ChartRollup, PrefixRollup, Rollup
from service.rollups import chart
from service.rollups.aggregate import SUM_COLUMNS
from service.services import chart_rollups
from service.services.analytics_pass import catch_up
from service.settings import Settings
from tests.services.traffic import T0, US, store, traffic

DAY_US = 86_400 * US
Scope = tuple[int, str, str]  # level, service, model


def chart_rows(session: Session) -> list[dict[str, Any]]:
    """Every chart row, by its key, without the id (a rebuild renumbers them)."""
    columns = [c for c in ChartRollup.__table__.columns if c.name != "id"]
    query = select(*columns).order_by(
        ChartRollup.grain_s, ChartRollup.level, ChartRollup.service, ChartRollup.model,
        ChartRollup.group_by, ChartRollup.group_value, ChartRollup.bucket_us,
    )  # fmt: skip
    return [dict(r) for r in session.execute(query).mappings()]


def prefix_days(session: Session) -> list[tuple[Any, ...]]:
    columns = [c for c in PrefixRollup.__table__.columns if c.name != "id"]
    query = select(*columns).where(PrefixRollup.grain_s == 86_400)
    return sorted(tuple(r) for r in session.execute(query).all())


def scopes(service: str, model: str) -> list[Scope]:
    """The filter scopes a (service, model) row counts in (chart.level_of)."""
    return [(0, service, model), (1, service, ""), (2, "", model), (3, "", "")]


@pytest.fixture
def built(session: Session, settings: Settings) -> list[dict[str, Any]]:
    """30 hours of traffic from 07:00 (two days), through the analytics pass."""
    store(session, traffic(500, seed=11, hours=30))
    catch_up(session, settings)
    return chart_rows(session)


def test_chart_rows_sum_the_minute_rollups_per_grain_and_scope(
    session: Session, built: list[dict[str, Any]]
) -> None:
    names = ["bucket_us", "service", "model", "replica", *SUM_COLUMNS]
    query = select(*[getattr(Rollup, n) for n in names]).where(Rollup.grain_s == 60)
    minutes = [dict(zip(names, r, strict=True)) for r in session.execute(query).all()]
    for grain_s in chart.GRAINS_S:
        grain_us = grain_s * US
        sums: dict[tuple[Any, ...], Counter[str]] = defaultdict(Counter)
        replicas: dict[tuple[Any, ...], set[str]] = defaultdict(set)
        for m in minutes:
            for scope in scopes(m["service"], m["model"]):
                key = (*scope, m["bucket_us"] // grain_us * grain_us)
                sums[key].update({c: m[c] for c in SUM_COLUMNS})
                if m["replica"]:
                    replicas[key].add(m["replica"])
        rows = [r for r in built if r["grain_s"] == grain_s and r["group_by"] == ""]
        got = {
            (r["level"], r["service"], r["model"], r["bucket_us"]): Counter(
                {c: r[c] for c in SUM_COLUMNS}
            )
            for r in rows
        }
        assert got == sums, grain_s
        for r in rows:
            key = (r["level"], r["service"], r["model"], r["bucket_us"])
            assert set(json.loads(r["replicas"] or "[]")) == replicas[key], key
            assert r["replica_count"] == len(replicas[key]), key
    assert {r["level"] for r in built} == {0, 1, 2, 3}
    assert len({r["bucket_us"] for r in built if r["grain_s"] == 86_400}) == 2


@pytest.mark.parametrize(
    "from_us",
    [
        None,
        (T0 + 2 * 3600 + 17 * 60) * US + 5,  # inside a minute, a 5 min and an hour bucket
        (T0 // 86_400 + 1) * DAY_US,  # midnight between the two days
        (T0 - 86_400) * US,  # before the data
        (T0 + 40 * 3600) * US,  # after it
    ],
)
def test_a_rebuild_from_any_point_gives_the_rows_of_a_full_build(
    session: Session, built: list[dict[str, Any]], from_us: int | None
) -> None:
    chart_rollups.rebuild_from(session, from_us)
    assert chart_rows(session) == built


def test_a_rebuild_leaves_the_buckets_before_it_and_rebuilds_those_after(
    session: Session, built: list[dict[str, Any]]
) -> None:
    """Every chart row is spoiled, then the rows from a minute on are rebuilt: the
    rows starting at or after it come back, the ones ending by it stay spoiled."""
    session.execute(update(ChartRollup).values(requests=ChartRollup.requests + 1000))
    from_us = (T0 + 5 * 3600 + 7 * 60) * US
    chart_rollups.rebuild_from(session, from_us)
    after = chart_rows(session)
    assert len(after) == len(built)
    for old, new in zip(built, after, strict=True):
        if old["bucket_us"] >= from_us:
            assert new == old
        elif old["bucket_us"] + old["grain_s"] * US <= from_us:
            assert new == old | {"requests": old["requests"] + 1000}


def test_ensure_built_builds_once_per_version(
    session: Session, built: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    days = prefix_days(session)
    assert days
    # As right after the migration that added them: no chart rows, no marker.
    session.execute(delete(ChartRollup))
    session.execute(delete(PrefixRollup).where(PrefixRollup.grain_s == 86_400))
    session.execute(delete(AnalyticsCursor).where(AnalyticsCursor.name == chart_rollups.MARKER))
    assert chart_rollups.ensure_built(session) is True
    assert chart_rows(session) == built and prefix_days(session) == days
    assert repository.get_cursor(session, chart_rollups.MARKER) == chart_rollups.VERSION

    session.execute(delete(ChartRollup).where(ChartRollup.grain_s == 86_400))
    assert chart_rollups.ensure_built(session) is False  # built already: not again
    assert chart_rows(session) == [r for r in built if r["grain_s"] != 86_400]

    monkeypatch.setattr(chart_rollups, "VERSION", chart_rollups.VERSION + 1)
    assert chart_rollups.ensure_built(session) is True  # the content changed: all again
    assert chart_rows(session) == built


def test_the_daily_prefix_rows_restart_from_their_hours(
    session: Session, built: list[dict[str, Any]]
) -> None:
    days = prefix_days(session)
    second_day = (T0 // 86_400 + 1) * DAY_US
    assert {d[1] for d in days} == {second_day - DAY_US, second_day}
    session.execute(delete(PrefixRollup).where(PrefixRollup.grain_s == 86_400))
    chart_rollups.rebuild_prefix_days(session, second_day + 5 * 3600 * US)
    assert prefix_days(session) == [d for d in days if d[1] == second_day]  # that day on
    chart_rollups.rebuild_prefix_days(session, None)
    assert prefix_days(session) == days


def test_a_span_is_rebuilt_alone_and_days_go_in_batches(
    session: Session, built: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`rebuild_between` replaces the rows of the buckets overlapping its hours (the
    day holding them rebuilt whole from its hours) and no other; a full rebuild
    takes whole days in batches of about BATCH_HOURS hours with data."""
    start = (T0 // 3600 + 3) * 3600 * US
    end = start + 7200 * US
    in_span = (ChartRollup.bucket_us >= start) & (ChartRollup.bucket_us < end)
    its_day = (ChartRollup.grain_s == 86_400) & (ChartRollup.bucket_us == start // DAY_US * DAY_US)
    session.execute(delete(ChartRollup).where(in_span | its_day))
    next_day = (start // DAY_US + 1) * DAY_US + 3600 * US  # a day not rebuilt
    later = ChartRollup.bucket_us == next_day
    session.execute(update(ChartRollup).where(later).values(requests=-1))  # left alone
    chart_rollups.rebuild_between(session, start, end)
    marked = [{**r, "requests": -1} if r["bucket_us"] == next_day else r for r in built]
    assert chart_rows(session) == marked

    hour = 3600 * US
    monkeypatch.setattr(chart_rollups, "BATCH_HOURS", 3)
    hours = [0, hour, DAY_US, 2 * DAY_US + hour, 9 * DAY_US]
    assert chart_rollups._day_batches(hours) == [(0, 2 * DAY_US), (2 * DAY_US, 10 * DAY_US)]
    chart_rollups.rebuild_from(session, None)
    assert chart_rows(session) == built
