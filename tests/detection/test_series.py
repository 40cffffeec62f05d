"""Unit tests of service.detection.series on hand-built Polars rollup frames.

They prove that `build_series` folds 60 s rollups (several replicas and deploys
per minute) into detection buckets with the right sums, distinct request starts
and replica counts, skips empty buckets instead of zero-filling them, and that
`stretch` / `contract_view` compute the before/after figures of contract section 5
(hit_rate, cacheable_fraction, rewarm_share, unique_prefix_ratio) plus the
figures the diagnosis needs, as ratios of summed tokens.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
import pytest

from service.analytics.definitions import CAUSES, SUM_COLUMNS
from service.detection.series import Series, build_series, stretch

MINUTE_US = 60_000_000
BUCKET_S = 300


def rollup(minute: int, replica: str = "", deploy: str = "", **sums: int) -> dict[str, Any]:
    """One 60 s rollup row of service `s`, model `m`; unnamed sums are 0."""
    unknown = set(sums) - set(SUM_COLUMNS)
    assert not unknown, unknown
    row: dict[str, Any] = {
        "grain_s": 60,
        "bucket_us": minute * MINUTE_US,
        "service": "s",
        "model": "m",
        "deploy": deploy,
        "replica": replica,
    }
    row.update({c: sums.get(c, 0) for c in SUM_COLUMNS})
    return row


def rollups(*rows: dict[str, Any]) -> pl.DataFrame:
    schema: dict[str, Any] = {
        "grain_s": pl.Int32,
        "bucket_us": pl.Int64,
        "service": pl.Utf8,
        "model": pl.Utf8,
        "deploy": pl.Utf8,
        "replica": pl.Utf8,
        **{c: pl.Int64 for c in SUM_COLUMNS},
    }
    return pl.DataFrame(list(rows), schema=schema)


def prefixes(*rows: tuple[int, int]) -> pl.DataFrame:
    """(minute, first_key) rows, as the prefix rollup table has them."""
    data = [(m * MINUTE_US, k) for m, k in rows]
    return pl.DataFrame(data, schema={"bucket_us": pl.Int64, "first_key": pl.Int64}, orient="row")


def make_series(sums: dict[str, list[int]], distinct: list[int], replicas: list[int]) -> Series:
    """A series of len(distinct) buckets; unnamed sums are 0."""
    n = len(distinct)
    full = {c: np.array(sums.get(c, [0] * n), dtype=np.int64) for c in SUM_COLUMNS}
    return Series(
        bucket_us=np.arange(n, dtype=np.int64) * BUCKET_S * 1_000_000,
        sums=full,
        distinct_prefixes=np.array(distinct, dtype=np.int64),
        replicas=np.array(replicas, dtype=np.int64),
    )


# --- build_series ---------------------------------------------------------------


def test_minutes_are_summed_into_their_detection_bucket() -> None:
    frame = rollups(
        rollup(0, "a", requests=2, prompt_tokens=1000, cached_tokens=600),
        rollup(1, "b", requests=1, prompt_tokens=500, cached_tokens=100),
        rollup(4, "a", "v2", requests=3, prompt_tokens=1500, cached_tokens=800),
        rollup(5, "a", requests=1, prompt_tokens=400, cached_tokens=400),
        rollup(9, "a", requests=1, prompt_tokens=600, cached_tokens=0),
    )
    series = build_series(frame, prefixes(), BUCKET_S)
    assert len(series) == 2
    assert series.bucket_us.tolist() == [0, 300_000_000]
    assert series.sums["requests"].tolist() == [6, 2]
    assert series.sums["prompt_tokens"].tolist() == [3000, 1000]
    assert series.sums["cached_tokens"].tolist() == [1500, 400]
    assert series.hit_rate.tolist() == [0.5, 0.4]
    assert series.weight.tolist() == [3000.0, 1000.0]
    assert series.weight.dtype == np.float64
    assert set(series.sums) == set(SUM_COLUMNS)


def test_every_rollup_sum_is_carried() -> None:
    values = {c: i + 1 for i, c in enumerate(SUM_COLUMNS)}
    frame = rollups(rollup(2, "a", **values), rollup(3, "b", **values))
    series = build_series(frame, prefixes(), BUCKET_S)
    assert {c: v.tolist() for c, v in series.sums.items()} == {
        c: [2 * v] for c, v in values.items()
    }


def test_buckets_start_on_their_boundary_whatever_minute_opens_them() -> None:
    frame = rollups(rollup(7, "a", prompt_tokens=10), rollup(13, "a", prompt_tokens=10))
    series = build_series(frame, prefixes(), BUCKET_S)
    assert series.bucket_us.tolist() == [300_000_000, 600_000_000]
    hourly = build_series(frame, prefixes(), 3600)
    assert hourly.bucket_us.tolist() == [0] and hourly.sums["prompt_tokens"].tolist() == [20]


def test_gaps_are_skipped_not_zero_filled() -> None:
    frame = rollups(
        rollup(61, "a", prompt_tokens=100, cached_tokens=50),
        rollup(2, "a", prompt_tokens=100, cached_tokens=90),  # rows need not be sorted
        rollup(30, "a", requests=0, prompt_tokens=0),  # a bucket without tokens
    )
    series = build_series(frame, prefixes(), BUCKET_S)
    assert series.bucket_us.tolist() == [0, 3_600_000_000]  # minutes 0-4 and 60-64
    assert series.hit_rate.tolist() == [0.9, 0.5]
    assert len(series.distinct_prefixes) == len(series.replicas) == 2


def test_no_rollups_is_an_empty_series() -> None:
    series = build_series(rollups(), prefixes((3, 1)), BUCKET_S)
    assert len(series) == 0
    assert series.hit_rate.tolist() == [] and series.replicas.tolist() == []


def test_distinct_prefixes_are_counted_once_per_bucket() -> None:
    frame = rollups(
        rollup(0, "a", prompt_tokens=10),
        rollup(5, "a", prompt_tokens=10),
        rollup(10, "a", prompt_tokens=10),
    )
    keys = prefixes(
        (0, 11),
        (0, 11),  # the same start on another replica in the same minute
        (3, 11),  # and again later in the bucket
        (4, 12),
        (5, 11),  # a new bucket counts it again
        (20, 99),  # a bucket without rollups is ignored
    )
    series = build_series(frame, keys, BUCKET_S)
    assert series.distinct_prefixes.tolist() == [2, 1, 0]


def test_replicas_are_distinct_named_replicas_per_bucket() -> None:
    frame = rollups(
        rollup(0, "a", prompt_tokens=10),
        rollup(1, "a", "v2", prompt_tokens=10),
        rollup(2, "b", prompt_tokens=10),
        rollup(3, "", prompt_tokens=10),  # records without a replica
        rollup(5, "", prompt_tokens=10),
        rollup(10, "c", prompt_tokens=10),
    )
    series = build_series(frame, prefixes(), BUCKET_S)
    assert series.replicas.tolist() == [2, 0, 1]


# --- stretch and contract_view ----------------------------------------------------


def test_stretch_figures_are_ratios_of_summed_tokens() -> None:
    series = make_series(
        {
            "prompt_tokens": [1000, 3000, 999],
            "cached_tokens": [700, 900, 0],
            "fp_requests": [10, 30, 1],
            "fp_prompt_tokens": [800, 2400, 999],
            "cacheable_tokens": [720, 1000, 0],
            "rewarm_tokens": [20, 380, 0],
            "rewarm_tokens_concurrent": [0, 80, 0],
            "rewarm_tokens_routing": [20, 200, 0],
            "rewarm_tokens_eviction": [0, 100, 0],
            "session_requests": [8, 12, 0],
            "history_rewrites": [1, 7, 0],
            "opening_fp_prompt_tokens": [100, 400, 0],
            "opening_cacheable_tokens": [90, 310, 0],
        },
        distinct=[1, 15, 1],
        replicas=[1, 4, 9],
    )
    s = stretch(series, 0, 2)  # the third bucket is outside
    assert s.hit_rate == 1600 / 4000
    assert s.cacheable_fraction == 1720 / 3200  # over fingerprinted prompt tokens
    assert s.rewarm_share == 400 / 4000  # over all prompt tokens (contract section 5)
    assert s.unique_prefix_ratio == 16 / 40
    assert s.history_rewrite_share == 8 / 20
    assert s.opening_cacheable_fraction == 400 / 500
    assert s.rewarm_tokens == {
        "below_minimum": 0,
        "concurrent": 80,
        "expiry": 0,
        "routing": 220,
        "eviction": 100,
        "unknown": 0,
    }
    assert set(s.rewarm_tokens) == set(CAUSES)
    assert s.replicas == 2  # median of [1, 4] = 2.5, as an int


def test_contract_view_holds_the_four_figures_rounded_to_four_places() -> None:
    series = make_series(
        {
            "prompt_tokens": [3000],
            "cached_tokens": [2000],
            "fp_prompt_tokens": [3000],
            "cacheable_tokens": [2500],
            "rewarm_tokens": [100],
            "fp_requests": [7],
        },
        distinct=[1],
        replicas=[1],
    )
    assert stretch(series, 0, 1).contract_view() == {
        "hit_rate": 0.6667,
        "cacheable_fraction": 0.8333,
        "rewarm_share": 0.0333,
        "unique_prefix_ratio": 0.1429,
    }


def test_figures_without_a_denominator_are_none_or_zero() -> None:
    series = make_series({"prompt_tokens": [500], "cached_tokens": [250]}, [0], [0])
    s = stretch(series, 0, 1)
    assert (s.hit_rate, s.rewarm_share, s.replicas) == (0.5, 0.0, 0)
    # No fingerprinted requests, no sessions, no openers: unknown, not zero.
    assert s.cacheable_fraction is None
    assert s.unique_prefix_ratio is None
    assert s.history_rewrite_share is None
    assert s.opening_cacheable_fraction is None
    assert s.contract_view() == {
        "hit_rate": 0.5,
        "cacheable_fraction": None,
        "rewarm_share": 0.0,
        "unique_prefix_ratio": None,
    }
    empty = stretch(series, 1, 1)
    assert (empty.hit_rate, empty.replicas) == (0.0, 0)


@pytest.mark.parametrize(
    ("replicas", "typical"),
    [([1, 1, 5, 1, 1], 1), ([4, 4, 1, 4], 4), ([1, 1, 4, 4, 4], 4), ([3], 3)],
)
def test_stretch_replicas_is_the_median_not_a_blip(replicas: list[int], typical: int) -> None:
    n = len(replicas)
    series = make_series({"prompt_tokens": [10] * n}, [0] * n, replicas)
    assert stretch(series, 0, n).replicas == typical


def test_a_stretch_from_built_series_matches_hand_computed_figures() -> None:
    frame = rollups(
        rollup(0, "a", requests=4, prompt_tokens=4000, cached_tokens=3000, fp_requests=4,
               fp_prompt_tokens=4000, cacheable_tokens=3600, rewarm_tokens=600,
               rewarm_tokens_eviction=600),
        rollup(1, "b", requests=2, prompt_tokens=2000, cached_tokens=200, fp_requests=2,
               fp_prompt_tokens=2000, cacheable_tokens=1800, rewarm_tokens=1600,
               rewarm_tokens_routing=1600),
        rollup(6, "a", requests=1, prompt_tokens=1000, cached_tokens=900),
    )  # fmt: skip
    series = build_series(frame, prefixes((0, 1), (1, 1), (1, 2)), BUCKET_S)
    view = stretch(series, 0, 1).contract_view()
    assert view == {
        "hit_rate": 0.5333,
        "cacheable_fraction": 0.9,
        "rewarm_share": 0.3667,
        "unique_prefix_ratio": 0.3333,
    }
    assert stretch(series, 0, 1).replicas == 2
