"""Contract section 4a's dollars, as Polars expressions over per-request columns,
and a regression's `cost` (section 5). Pure; the prices come from the caching
profile of each record (`service.profiles`), as the columns of PRICE_COLUMNS.

Per request r, with w = min(cache_write_tokens, prompt_tokens - cached_tokens),
h = min(cache_write_1h_tokens, w) of them written to a one-hour cache (null: 0)
and u = prompt_tokens - cached_tokens - w (the uncached tokens not written):

- spend_usd = (u * input + cached_tokens * cached + (w - h) * write + h * write_1h) / 1e6;
- miss_price = (u * input + (w - h) * write + h * write_1h) / (u + w), or input
  when u + w = 0: what an uncached token of r cost on average;
- wasted_usd = rewarm_tokens * (miss_price - cached) / 1e6: what recomputing
  tokens that were cacheable cost above their cached price.

A request whose model has no input price has null costs, not 0: "no price" must
not read as "free". A missing cached or write price is the input price (a
provider without a discount, or one that bills writes as input), a missing
one-hour write price the write price; the profile resolution fills those before
they get here (and prices a record whose writes are not split by TTL, asking for
an hour, at the one-hour price as its write price), the fallbacks below only guard.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

#: Dollars per million tokens, per request; null input price: unpriced.
PRICE_COLUMNS: tuple[str, ...] = (
    "input_usd_per_mtok",
    "cached_usd_per_mtok",
    "write_usd_per_mtok",
    "write_1h_usd_per_mtok",
)
#: The columns `with_request_costs` adds.
COST_COLUMNS: tuple[str, ...] = ("spend_usd", "wasted_usd")
_PER_MTOK = 1e6


def with_request_costs(frame: pl.DataFrame) -> pl.DataFrame:
    """`frame` with `spend_usd` and `wasted_usd` per row. Reads prompt_tokens,
    cached_tokens, cache_write_tokens (absent: 0), rewarm_tokens and the
    PRICE_COLUMNS (absent: unpriced)."""
    missing = [pl.lit(None, pl.Float64).alias(c) for c in PRICE_COLUMNS if c not in frame.columns]
    for name in ("cache_write_tokens", "cache_write_1h_tokens"):
        if name not in frame.columns:
            missing.append(pl.lit(0, pl.Int64).alias(name))
    return frame.with_columns(missing).with_columns(_spend(), _wasted())


def _prices() -> tuple[pl.Expr, pl.Expr, pl.Expr, pl.Expr]:
    inp = pl.col("input_usd_per_mtok")
    write = pl.coalesce(pl.col("write_usd_per_mtok"), inp)
    return (
        inp,
        pl.coalesce(pl.col("cached_usd_per_mtok"), inp),
        write,
        pl.coalesce(pl.col("write_1h_usd_per_mtok"), write),
    )


def _split() -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    """(u, w, h): the uncached tokens billed at the input price, those written,
    and of those the ones written to a one-hour cache."""
    uncached = pl.col("prompt_tokens") - pl.col("cached_tokens")
    written = pl.min_horizontal(pl.col("cache_write_tokens").fill_null(0), uncached)
    one_hour = pl.min_horizontal(pl.col("cache_write_1h_tokens").fill_null(0), written)
    return uncached - written, written, one_hour


def _missed_usd() -> pl.Expr:
    """What the uncached tokens cost, a million times over: u * input + (w - h) *
    write + h * write_1h."""
    inp, _, write, write_1h = _prices()
    u, w, h = _split()
    return u * inp + (w - h) * write + h * write_1h


def _spend() -> pl.Expr:
    _, cached, _, _ = _prices()
    spend = _missed_usd() + pl.col("cached_tokens") * cached
    return (spend / _PER_MTOK).alias("spend_usd")


def _wasted() -> pl.Expr:
    inp, cached, _, _ = _prices()
    u, w, _ = _split()
    miss_price = pl.when(u + w > 0).then(_missed_usd() / (u + w)).otherwise(inp)
    return (pl.col("rewarm_tokens") * (miss_price - cached) / _PER_MTOK).alias("wasted_usd")


@dataclass(frozen=True)
class RegressionCost:
    """A regression's `cost` (contract section 5), in dollars a day."""

    usd_per_day_before: float
    usd_per_day_after: float
    extra_usd_per_day: float

    def as_dict(self) -> dict[str, float]:
        return {
            "usd_per_day_before": self.usd_per_day_before,
            "usd_per_day_after": self.usd_per_day_after,
            "extra_usd_per_day": self.extra_usd_per_day,
        }


def regression_cost(
    before: Side,
    after: Side,
) -> RegressionCost | None:
    """The after side's spend per day, against what its prompt tokens per day would
    have cost at the before side's spend per prompt token. None when either side
    had no priced request, or no prompt tokens or time to divide by."""
    if not (before.priced_requests and after.priced_requests):
        return None
    if before.prompt_tokens <= 0 or after.days <= 0:
        return None
    after_per_day = after.spend_usd / after.days
    before_per_day = before.spend_usd / before.prompt_tokens * after.prompt_tokens / after.days
    return RegressionCost(before_per_day, after_per_day, after_per_day - before_per_day)


@dataclass(frozen=True)
class Side:
    """The sums of one side of a change that its cost is computed from."""

    spend_usd: float
    prompt_tokens: int
    priced_requests: int
    days: float
