"""Contract section 4a's dollars (`service.analytics.costs`) against hand
computations, and a regression's `cost` (section 5)."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

from service.analytics.costs import (
    COST_COLUMNS,
    PRICE_COLUMNS,
    RegressionCost,
    Side,
    regression_cost,
    with_request_costs,
)

#: Claude Sonnet's figures per million tokens: input, cache read, 5 min cache write.
ANTHROPIC = {"input_usd_per_mtok": 3.00, "cached_usd_per_mtok": 0.30, "write_usd_per_mtok": 3.75}
#: GPT-4o's: a cached token at half price, writes not billed apart.
OPENAI = {"input_usd_per_mtok": 2.50, "cached_usd_per_mtok": 1.25, "write_usd_per_mtok": None}
UNPRICED = dict.fromkeys(PRICE_COLUMNS)

FRAME_SCHEMA: dict[str, pl.DataType] = {
    "prompt_tokens": pl.Int64(),
    "cached_tokens": pl.Int64(),
    "cache_write_tokens": pl.Int64(),
    "rewarm_tokens": pl.Int64(),
    **dict.fromkeys(PRICE_COLUMNS, pl.Float64()),
}


def costs(*rows: dict[str, Any]) -> list[tuple[float | None, float | None]]:
    """(spend_usd, wasted_usd) of each row."""
    out = with_request_costs(pl.DataFrame(list(rows), schema=FRAME_SCHEMA))
    return list(out.select(COST_COLUMNS).iter_rows())


def request(
    prompt: int, cached: int, written: int | None, rewarm: int, prices: dict[str, float | None]
) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "cache_write_tokens": written,
        "rewarm_tokens": rewarm,
        **prices,
    }


def test_anthropic_request_with_writes() -> None:
    # u = 10,000 - 6,000 - 3,000 = 1,000 at the input price, 3,000 at the write price.
    [(spend, wasted)] = costs(request(10_000, 6_000, 3_000, 2_000, ANTHROPIC))
    assert spend == pytest.approx((1_000 * 3.00 + 6_000 * 0.30 + 3_000 * 3.75) / 1e6)
    assert spend == pytest.approx(0.01605)
    # miss price (1,000 * 3.00 + 3,000 * 3.75) / 4,000 = 3.5625 a million tokens.
    assert wasted == pytest.approx(2_000 * (3.5625 - 0.30) / 1e6)
    assert wasted == pytest.approx(0.006525)


def test_openai_request_without_writes() -> None:
    # No write price: a write would cost the input price; none here anyway.
    [(spend, wasted)] = costs(request(5_000, 1_024, 0, 2_048, OPENAI))
    assert spend == pytest.approx((3_976 * 2.50 + 1_024 * 1.25) / 1e6)
    assert spend == pytest.approx(0.01122)
    assert wasted == pytest.approx(2_048 * (2.50 - 1.25) / 1e6)
    assert wasted == pytest.approx(0.00256)


def test_rewarm_waste_is_priced_above_the_cached_price() -> None:
    """The same tokens, recomputed or not: waste is the difference to cached."""
    [(spend_miss, wasted), (spend_hit, no_waste)] = costs(
        request(4_096, 0, 0, 4_096, ANTHROPIC),  # a full rewarm, nothing written
        request(4_096, 4_096, 0, 0, ANTHROPIC),  # the hit it should have been
    )
    assert spend_miss == pytest.approx(4_096 * 3.00 / 1e6)
    assert spend_hit == pytest.approx(4_096 * 0.30 / 1e6)
    assert wasted == pytest.approx(spend_miss - spend_hit)
    assert no_waste == 0.0


def test_no_input_price_means_null_costs_not_zero() -> None:
    cached_only = {**UNPRICED, "cached_usd_per_mtok": 0.30}
    rows = costs(request(1_000, 0, 0, 500, UNPRICED), request(1_000, 0, 0, 500, cached_only))
    assert rows == [(None, None), (None, None)]


def test_missing_price_and_write_columns() -> None:
    """A frame without price columns is unpriced; without cache_write_tokens, 0."""
    bare = pl.DataFrame({"prompt_tokens": [1_000], "cached_tokens": [0], "rewarm_tokens": [500]})
    assert with_request_costs(bare).select(COST_COLUMNS).row(0) == (None, None)
    priced = bare.with_columns(pl.lit(2.0).alias("input_usd_per_mtok"))
    spend, wasted = with_request_costs(priced).select(COST_COLUMNS).row(0)
    # No cached price: the input price (no discount), so no waste either.
    assert spend == pytest.approx(1_000 * 2.0 / 1e6)
    assert wasted == 0.0


def test_null_cache_write_tokens_count_as_none_written() -> None:
    [with_null] = costs(request(10_000, 6_000, None, 2_000, ANTHROPIC))
    [with_zero] = costs(request(10_000, 6_000, 0, 2_000, ANTHROPIC))
    assert with_null == with_zero
    assert with_zero[0] == pytest.approx((4_000 * 3.00 + 6_000 * 0.30) / 1e6)


def test_cache_write_tokens_are_clamped_to_the_uncached_tokens() -> None:
    # 900 written but only 600 uncached: w = 600, u = 0.
    [(spend, wasted)] = costs(request(1_000, 400, 900, 300, ANTHROPIC))
    assert spend == pytest.approx((400 * 0.30 + 600 * 3.75) / 1e6)
    assert spend == pytest.approx(0.00237)
    assert wasted == pytest.approx(300 * (3.75 - 0.30) / 1e6)  # miss price: the write price


def test_all_cached_prices_a_miss_at_the_input_price() -> None:
    """u + w = 0: miss_price is the input price, not 0 / 0."""
    [(spend, no_rewarm), (_, wasted)] = costs(
        request(2_000, 2_000, 0, 0, ANTHROPIC),
        request(2_000, 2_000, 500, 100, ANTHROPIC),  # the formula alone: 100 rewarm tokens
    )
    assert spend == pytest.approx(2_000 * 0.30 / 1e6)
    assert no_rewarm == 0.0
    assert wasted == pytest.approx(100 * (3.00 - 0.30) / 1e6)


def test_regression_cost_against_a_hand_computation() -> None:
    # Before: $10 for 1M prompt tokens ($10 per Mtok). After: 2M tokens over 2 days
    # for $30, i.e. $15 a day where the before rate gives $10 a day.
    before = Side(spend_usd=10.0, prompt_tokens=1_000_000, priced_requests=50, days=1.0)
    after = Side(spend_usd=30.0, prompt_tokens=2_000_000, priced_requests=80, days=2.0)
    cost = regression_cost(before, after)
    assert cost == RegressionCost(10.0, 15.0, 5.0)
    assert cost.as_dict() == {
        "usd_per_day_before": 10.0,
        "usd_per_day_after": 15.0,
        "extra_usd_per_day": 5.0,
    }


def test_regression_cost_is_none_without_prices_or_data() -> None:
    priced = Side(spend_usd=10.0, prompt_tokens=1_000, priced_requests=5, days=1.0)
    unpriced = Side(spend_usd=0.0, prompt_tokens=1_000, priced_requests=0, days=1.0)
    assert regression_cost(unpriced, priced) is None
    assert regression_cost(priced, unpriced) is None
    no_tokens = Side(spend_usd=0.0, prompt_tokens=0, priced_requests=5, days=1.0)
    assert regression_cost(no_tokens, priced) is None
    no_time = Side(spend_usd=10.0, prompt_tokens=1_000, priced_requests=5, days=0.0)
    assert regression_cost(priced, no_time) is None


def test_anthropic_writes_priced_by_their_ttl() -> None:
    """Issue 34: 5-minute writes at 1.25x input, 1-hour writes at 2x, each at its
    own rate. 10,000 prompt tokens: 4,000 read, 5,000 written of which 2,000 to
    the one-hour cache, 1,000 uncached and not written."""
    frame = pl.DataFrame(
        {
            "prompt_tokens": [10_000, 10_000],
            "cached_tokens": [4_000, 4_000],
            "cache_write_tokens": [5_000, 5_000],
            "cache_write_1h_tokens": [2_000, None],
            "rewarm_tokens": [3_000, 3_000],
            **{k: [v, v] for k, v in ANTHROPIC.items()},
            "write_1h_usd_per_mtok": [6.00, 6.00],
        }
    )
    [(split_spend, split_wasted), (unsplit_spend, _)] = (
        with_request_costs(frame).select(COST_COLUMNS).rows()
    )
    assert split_spend == pytest.approx(
        (1_000 * 3.00 + 4_000 * 0.30 + 3_000 * 3.75 + 2_000 * 6.00) / 1e6
    )
    assert split_spend == pytest.approx(0.02745)
    # A miss costs (1,000 * 3 + 3,000 * 3.75 + 2,000 * 6) / 6,000 = $4.375 a million.
    assert split_wasted == pytest.approx(3_000 * (4.375 - 0.30) / 1e6)
    # Not split: every write at the write price the profile gave the record.
    assert unsplit_spend == pytest.approx((1_000 * 3.00 + 4_000 * 0.30 + 5_000 * 3.75) / 1e6)
