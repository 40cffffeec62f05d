"""services.series on the real database, beside what tests/rollups/test_chart.py
checks (every answer equals re-bucketing the minute rollups): which minutes a
range includes, which chart grains a bucket reads (about one row a bucket), the
empty answer, and the bucket limit counting only the buckets that hold data.
(tests/dashboards/test_series.py compares the dashboard's series with the API's.)"""

from typing import Any

import pytest
from sqlalchemy.orm import Session

from service.services import series
from service.services.analytics_pass import catch_up
from service.services.series import SeriesQuery, TooManyBuckets
from service.settings import Settings
from tests.services.traffic import T0, US, rec, store, traffic

MINUTE = 60


def query(
    bucket_s: int, from_s: float | None = None, to_s: float | None = None, **scope: str
) -> SeriesQuery:
    return SeriesQuery(
        scope.get("service"),
        scope.get("model"),
        None if from_s is None else round(from_s * US),
        None if to_s is None else round(to_s * US),
        bucket_s,
    )


def requests(answer: series.SeriesAnswer) -> list[tuple[str, Any]]:
    return [(b["ts"], b["requests"]) for b in answer.buckets]


def test_a_range_holds_the_minutes_starting_in_it(session: Session, settings: Settings) -> None:
    store(session, [rec(f"r{i}", T0 + i * MINUTE + 30, [i]) for i in range(3)])
    catch_up(session, settings)
    everything = series.series(session, query(MINUTE))
    assert requests(everything) == [
        ("2025-11-29T07:00:00Z", 1),
        ("2025-11-29T07:01:00Z", 1),
        ("2025-11-29T07:02:00Z", 1),
    ]
    # A bound inside a minute rounds up to the next: the minute is whole or absent.
    assert [r for _, r in requests(series.series(session, query(MINUTE, T0 + 1)))] == [1, 1]
    assert len(series.series(session, query(MINUTE, T0, T0 + 2 * MINUTE)).buckets) == 2
    assert len(series.series(session, query(MINUTE, T0, T0 + 2 * MINUTE + 1)).buckets) == 3
    assert series.series(session, query(MINUTE, T0 + 3 * MINUTE)).buckets == []
    assert everything.totals["requests"] == 3
    hourly = series.series(session, query(3600, T0 + 1))
    assert requests(hourly) == [("2025-11-29T07:00:00Z", 2)] and hourly.totals["requests"] == 2


@pytest.mark.parametrize(
    ("bucket_s", "grains"),
    [
        (3600, (3600,)),  # a stored grain: one row a bucket
        (86_400, (86_400,)),
        (5400, (300,)),  # 1.5 h: the coarsest grain dividing it is 5 min
        (420, (60,)),  # 7 min: minutes only
    ],
)
def test_a_bucket_reads_the_coarsest_grain_dividing_it(
    session: Session, settings: Settings, bucket_s: int, grains: tuple[int, ...]
) -> None:
    store(session, traffic(300, seed=21, hours=48))
    catch_up(session, settings)
    day = (T0 // 86_400 + 1) * 86_400  # a whole day of the data
    answer = series.series(session, query(bucket_s, day, day + 86_400))
    assert answer.grains_s == grains
    assert sum(b["requests"] for b in answer.buckets) == answer.totals["requests"] > 0
    if grains == (bucket_s,):  # one row a bucket, and the day's row for the totals
        assert answer.rows == len(answer.buckets) + 1


def test_no_data_is_no_buckets_and_empty_totals(session: Session) -> None:
    answer = series.series(session, query(MINUTE))
    assert answer.buckets == [] and answer.rows == 0
    totals = answer.totals
    assert totals["requests"] == 0 and totals["prompt_tokens"] == 0
    assert totals["hit_rate"] is None and totals["capture_ratio"] is None
    assert totals["rewarms"] == dict.fromkeys(("total", *series.CAUSES), 0)
    assert totals["ttft_ms"] == {
        "hit": {"p50": None, "p95": None},
        "miss": {"p50": None, "p95": None},
    }


def test_the_bucket_limit_counts_only_buckets_with_data(
    session: Session, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two minutes of data ten days apart span 14,401 minutes but fill two."""
    store(session, [rec("early", T0 - 10 * 86_400, [1]), rec("late", T0, [1])])
    catch_up(session, settings)
    monkeypatch.setattr(series, "MAX_BUCKETS", 2)
    assert len(series.series(session, query(MINUTE)).buckets) == 2
    store(session, [rec("third", T0 - 5 * 86_400, [1])])
    catch_up(session, settings)
    with pytest.raises(TooManyBuckets, match="more than 2 buckets with data"):
        series.series(session, query(MINUTE))
    assert len(series.series(session, query(MINUTE, T0 - 9 * 86_400)).buckets) == 2
