"""The rollup sums of `service.rollups.aggregate` (what the analytics pass stores)
over per-request results, and the ratios of contract section 4 taken from them."""

from __future__ import annotations

import polars as pl
import pytest

from service.analytics import compute_request_metrics
from service.analytics.definitions import SUM_COLUMNS, USD_COLUMNS, ratios
from service.rollups import aggregate
from tests.analytics.reference import record, to_frame

S = 1_000_000
GRAIN_S = 10


def _joined() -> pl.DataFrame:
    records = [
        # bucket 0: a warm-up, then two rewarms (routing, unknown)
        record(id=1, ts_us=0, prompt_tokens=300, block_size=100, block_hashes=[1, 2, 3],
               replica="r1", session_id="s"),
        record(id=2, ts_us=1 * S, prompt_tokens=400, cached_tokens=300, block_size=100,
               block_hashes=[1, 2, 3, 4], replica="r1", session_id="s"),
        record(id=3, ts_us=2 * S, prompt_tokens=500, block_size=100, block_hashes=[1, 2],
               replica="r2", ttft_ms=250.4),
        record(id=4, ts_us=3 * S, prompt_tokens=400, block_size=100, block_hashes=[1, 2, 3],
               ttft_ms=120.3),
        # bucket 1: an unfingerprinted hit and a history rewrite
        record(id=5, ts_us=10 * S, prompt_tokens=100, cached_tokens=100),
        record(id=6, ts_us=11 * S, prompt_tokens=600, block_size=100,
               block_hashes=[9, 9, 9], session_id="s", service="other"),
    ]  # fmt: skip
    frame = to_frame(records)
    results, _ = compute_request_metrics(frame, 3600.0)
    return aggregate.join_results(frame, results)


def _per_bucket(joined: pl.DataFrame) -> list[dict[str, int]]:
    rows = aggregate.rollup_sums(joined, GRAIN_S)
    return rows.group_by("bucket_us").agg(pl.col(SUM_COLUMNS).sum()).sort("bucket_us").to_dicts()


def test_rollup_sums_per_bucket() -> None:
    b0, b1 = _per_bucket(_joined())
    assert b0 == {
        "bucket_us": 0,
        "requests": 4,
        "prompt_tokens": 1600,
        "cached_tokens": 300,
        "hits": 1,
        "misses": 3,
        "fp_requests": 4,
        "fp_prompt_tokens": 1600,
        "fp_cached_tokens": 300,
        "cacheable_tokens": 300 + 200 + 300,
        "rewarms_concurrent": 0,
        "rewarms_routing": 1,  # id 3 on r2: blocks warmed on r1 only
        "rewarms_eviction": 0,
        "rewarms_unknown": 1,  # id 4: no replica
        "rewarm_tokens": 0 + 200 + 300,
        "rewarm_tokens_concurrent": 0,
        "rewarm_tokens_routing": 200,
        "rewarm_tokens_eviction": 0,
        "rewarm_tokens_unknown": 300,
        # Continuations only (id 2), not the session's opening request (id 1): the
        # requests whose history can be rewritten.
        "session_requests": 1,
        "history_rewrites": 0,
        "opening_fp_prompt_tokens": 300 + 500 + 400,
        "opening_cacheable_tokens": 0 + 200 + 300,
        # No profile: neither cause of section 4a, and no prices, so no dollars.
        "rewarms_below_minimum": 0,
        "rewarms_expiry": 0,
        "rewarm_tokens_below_minimum": 0,
        "rewarm_tokens_expiry": 0,
        "cache_write_tokens": 0,
        "priced_requests": 0,
        **dict.fromkeys(USD_COLUMNS, 0.0),
        # The findings' sums (contract section 5b): no cache keys, no rewrite here.
        "cache_key_requests": 0,
        "rewrite_prompt_tokens": 0,
        "rewrite_rewarm_tokens": 0,
        "rewarms_expiry_2ttl": 0,
        # The callers' summed wait (ms, whole per rollup row): ids 3 and 4 (on r2 and
        # on no replica) say theirs, the others add 0.
        "ttft_ms_total": 250 + 120,
    }
    assert b1["requests"] == 2 and b1["fp_requests"] == 1
    assert b1["hits"] == 1 and b1["history_rewrites"] == 1 and b1["session_requests"] == 1
    # id 6 rewrote its session's history (600 prompt tokens, none of them seen).
    assert b1["rewrite_prompt_tokens"] == 600 and b1["rewrite_rewarm_tokens"] == 0
    assert b1["cacheable_tokens"] == 0


def test_rows_are_keyed_by_service_deploy_and_replica() -> None:
    rows = aggregate.rollup_sums(_joined(), GRAIN_S)
    keys = rows.select("bucket_us", "service", "replica").sort(pl.all()).rows()
    assert keys == [(0, "svc", ""), (0, "svc", "r1"), (0, "svc", "r2"), (10 * S, "other", ""),
                    (10 * S, "svc", "")]  # fmt: skip
    assert rows["prompt_tokens"].sum() == 2300


def test_prefix_sums_count_each_leading_prefix_once_per_bucket() -> None:
    prefixes = aggregate.prefix_sums(_joined(), GRAIN_S)
    # Bucket 0: first block 1 on r1 (ids 1, 2), r2 (id 3) and no replica (id 4).
    assert sorted(prefixes.filter(pl.col("bucket_us") == 0)["requests"].to_list()) == [1, 1, 2]
    assert prefixes["first_key"].n_unique() == 2  # 1 and 9: counted again, not summed
    assert prefixes["requests"].sum() == 5  # id 5 is not fingerprinted


def test_ratios_of_the_stored_sums() -> None:
    joined = _joined()
    rows = aggregate.rollup_sums(joined, GRAIN_S)
    total: dict[str, float] = {name: rows[name].sum() for name in SUM_COLUMNS}
    total["distinct_prefixes"] = aggregate.prefix_sums(joined, GRAIN_S)["first_key"].n_unique()
    m = ratios(total)
    assert m["hit_rate"] == pytest.approx(400 / 2300)
    assert m["cacheable_fraction"] == pytest.approx(800 / 2200)
    assert m["capture_ratio"] == pytest.approx(300 / 800)
    assert m["rewarm_share"] == pytest.approx(500 / 2300)
    assert m["unique_prefix_ratio"] == pytest.approx(2 / 5)
    assert m["history_rewrite_share"] == pytest.approx(1 / 2)
    assert m["opening_cacheable_fraction"] == pytest.approx(500 / 1200)
