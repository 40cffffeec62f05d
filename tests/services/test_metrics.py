"""services.metrics on the real database: the query's filters, range and bucket
reach the series path, the answer echoes `bucket_s`, and every ratio is one of
summed numerators and denominators, never an average of the buckets' ratios.
(tests/api/test_metrics.py checks GET /v1/metrics over HTTP.)"""

from typing import Any

import pytest
from sqlalchemy.orm import Session

from service.services import series
from service.services.analytics_pass import catch_up
from service.services.metrics import HOUR_S, MINUTE_S, MetricsQuery, TooManyBuckets, metrics
from service.settings import Settings
from tests.services.traffic import T0, US, rec, store


@pytest.fixture
def stored(session: Session, settings: Settings) -> None:
    """Minute 0: a cold request and its warm repeat on replica a (a hit). Minute 1:
    the same prefix on replica b (a routing rewarm) and a large record without
    blocks. Two other services in minute 2, one on another model."""
    store(
        session,
        [
            rec("cold", T0, [1, 2, 3, 4], replica="a", ttft_ms=400),
            rec("warm", T0 + 10, [1, 2, 3, 5], cached_tokens=300, replica="a", ttft_ms=100),
            rec("moved", T0 + 70, [1, 2, 3, 6], replica="b", ttft_ms=420),
            rec("plain", T0 + 80, None, prompt_tokens=1000, cached_tokens=900),
            rec("search", T0 + 130, [1, 2], cached_tokens=200, service="search"),
            rec("other", T0 + 140, [1, 2], model="m2", service="tools"),
        ],
    )
    catch_up(session, settings)


def ask(session: Session, bucket_s: int = MINUTE_S, **filters: str) -> dict[str, Any]:
    query = MetricsQuery(filters.get("service"), filters.get("model"), None, None, bucket_s)
    return metrics(session, query)


@pytest.mark.usefixtures("stored")
def test_totals_are_ratios_of_sums(session: Session) -> None:
    answer = ask(session, service="assistant")
    assert answer["bucket_s"] == MINUTE_S
    buckets = answer["buckets"]
    assert [(b["ts"], b["requests"]) for b in buckets] == [
        ("2025-11-29T07:00:00Z", 2),
        ("2025-11-29T07:01:00Z", 2),
    ]
    assert [b["hit_rate"] for b in buckets] == [300 / 800, 900 / 1400]
    totals = answer["totals"]
    assert totals["hit_rate"] == 1200 / 2200  # not the mean of 0.375 and 0.643
    assert totals["cacheable_tokens"] == 600 and totals["fingerprinted_prompt_tokens"] == 1200
    assert totals["cacheable_fraction"] == 600 / 1200
    assert totals["capture_ratio"] == 300 / 600
    assert totals["rewarms"] == {"total": 1, "below_minimum": 0, "concurrent": 0, "expiry": 0,
                                 "routing": 1, "eviction": 0, "unknown": 0}  # fmt: skip
    assert totals["rewarm_tokens"] == 300 and totals["rewarm_share"] == 300 / 2200
    assert totals["replicas"] == 2


@pytest.mark.usefixtures("stored")
def test_the_filters_and_the_bucket_reach_the_series(session: Session) -> None:
    everything = ask(session, HOUR_S)
    assert everything["bucket_s"] == HOUR_S
    assert [b["requests"] for b in everything["buckets"]] == [6]
    assert ask(session, service="search")["totals"]["requests"] == 1
    # Reuse spans the services of one model, never models.
    assert ask(session, service="search")["totals"]["cacheable_tokens"] == 200
    assert ask(session, model="m2")["totals"]["cacheable_tokens"] == 0
    assert ask(session, model="m")["totals"]["requests"] == 5
    bounded = metrics(session, MetricsQuery(None, None, (T0 + 60) * US, (T0 + 120) * US, 60))
    assert bounded["totals"]["requests"] == 2


@pytest.mark.usefixtures("stored")
def test_too_many_buckets_is_raised_as_the_series_path_does(
    session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(series, "MAX_BUCKETS", 2)
    with pytest.raises(TooManyBuckets):
        ask(session)
    assert len(ask(session, HOUR_S)["buckets"]) == 1
