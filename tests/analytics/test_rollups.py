"""Sums per group and the metric formulas."""

from __future__ import annotations

import polars as pl
import pytest

from service.analytics import (
    SUM_COLUMNS,
    cacheable_fraction,
    capture_ratio,
    compute_request_metrics,
    hit_rate,
    is_hit,
    join_results,
    metrics,
    rewarm_share,
    rollup,
    unique_prefix_ratio,
)
from tests.analytics.reference import record, to_frame

S = 1_000_000


def _joined() -> pl.DataFrame:
    records = [
        # bucket 0: a warm-up, then two rewarms (routing, unknown)
        record(id=1, ts_us=0, prompt_tokens=300, block_size=100, block_hashes=[1, 2, 3],
               replica="r1", session_id="s"),
        record(id=2, ts_us=1 * S, prompt_tokens=400, cached_tokens=300, block_size=100,
               block_hashes=[1, 2, 3, 4], replica="r1", session_id="s"),
        record(id=3, ts_us=2 * S, prompt_tokens=500, block_size=100, block_hashes=[1, 2],
               replica="r2"),
        record(id=4, ts_us=3 * S, prompt_tokens=400, block_size=100, block_hashes=[1, 2, 3]),
        # bucket 1: an unfingerprinted hit and a history rewrite
        record(id=5, ts_us=10 * S, prompt_tokens=100, cached_tokens=100),
        record(id=6, ts_us=11 * S, prompt_tokens=600, block_size=100,
               block_hashes=[9, 9, 9], session_id="s", service="other"),
    ]  # fmt: skip
    frame = to_frame(records)
    results, _ = compute_request_metrics(frame, 3600.0)
    return join_results(frame, results).with_columns((pl.col("ts_us") // (10 * S)).alias("bucket"))


def test_rollup_sums_per_bucket() -> None:
    sums = rollup(_joined(), ["bucket"])
    assert sums.columns == ["bucket", *SUM_COLUMNS]
    b0, b1 = sums.to_dicts()
    assert b0 == {
        "bucket": 0,
        "requests": 4,
        "prompt_tokens": 1600,
        "cached_tokens": 300,
        "hits": 1,
        "misses": 3,
        "fingerprinted_requests": 4,
        "fingerprinted_prompt_tokens": 1600,
        "fingerprinted_cached_tokens": 300,
        "cacheable_tokens": 300 + 200 + 300,
        "rewarms": 2,
        "rewarms_concurrent": 0,
        "rewarms_routing": 1,  # id 3 on r2: blocks warmed on r1 only
        "rewarms_eviction": 0,
        "rewarms_unknown": 1,  # id 4: no replica
        "rewarm_tokens": 0 + 200 + 300,
        "session_requests": 2,
        "history_rewrites": 0,
        "opening_fingerprinted_prompt_tokens": 300 + 500 + 400,
        "opening_cacheable_tokens": 0 + 200 + 300,
        "distinct_first_keys": 1,
    }
    assert b1["requests"] == 2 and b1["fingerprinted_requests"] == 1
    assert b1["hits"] == 1 and b1["history_rewrites"] == 1 and b1["session_requests"] == 1
    assert b1["distinct_first_keys"] == 1 and b1["cacheable_tokens"] == 0


def test_rollup_by_service_and_total() -> None:
    joined = _joined()
    by_service = rollup(joined, ["service"])
    assert by_service["service"].to_list() == ["other", "svc"]
    total = rollup(joined).row(0, named=True)
    assert total["requests"] == 6
    assert total["distinct_first_keys"] == 2  # 1 and 9: counted again, not summed
    assert total["prompt_tokens"] == by_service["prompt_tokens"].sum()


def test_metric_formulas() -> None:
    total = rollup(_joined()).row(0, named=True)
    m = metrics(total)
    assert m["hit_rate"] == pytest.approx(400 / 2300)
    assert m["cacheable_fraction"] == pytest.approx(800 / 2200)
    assert m["capture_ratio"] == pytest.approx(300 / 800)
    assert m["rewarm_share"] == pytest.approx(500 / 2300)
    assert m["unique_prefix_ratio"] == pytest.approx(2 / 5)
    assert m["history_rewrite_share"] == pytest.approx(1 / 3)
    assert m["opening_cacheable_fraction"] == pytest.approx(500 / 1200)


def test_zero_denominators_are_none() -> None:
    assert hit_rate(0, 0) is None
    assert cacheable_fraction(0, 0) is None
    assert capture_ratio(10, 0) is None
    assert rewarm_share(0, 0) is None
    assert unique_prefix_ratio(0, 0) is None
    assert hit_rate(5, 10) == 0.5


def test_is_hit() -> None:
    assert is_hit(50, 100) and not is_hit(49, 100) and is_hit(0, 0) and is_hit(1, 1)
