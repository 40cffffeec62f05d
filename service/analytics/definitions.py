"""Contract section 4 in one place: the rewarm causes, the sums every rollup stores
and the ratios every metric is. The analytics pass, the rollups, the read API,
detection, the Prometheus gauges, the dashboard and its downsampler all import
them from here; nothing else spells a formula or the cause list out.

Why sums and ratios: every metric cachewatch reports is a ratio of two totals
(cached over prompt tokens, cacheable over fingerprinted prompt tokens, ...).
Totals add across minutes, services, deploys and replicas; ratios do not (an
average of hourly hit rates is not the day's hit rate). So a rollup row stores
the sums of `SUMS` (one column each, `service.models.RollupSums`), and a ratio is
taken last, from the sums of whatever the answer covers, by `ratio`, `ratios` or
`ratio_expr`, which all read `RATIOS`. A ratio is None when its denominator is 0:
no data is not a 0% hit rate.

`distinct_prefixes` is the one input of a ratio that is not a sum: distinct
leading prefixes do not add up across buckets, so a reader counts them over the
union of its rows' prefix sets and passes the count in beside the sums.

To add a cause: append it to CAUSES (its `rewarms_<cause>` and
`rewarm_tokens_<cause>` sums follow), then add those columns to `RollupSums` with a
migration. To add a sum: one entry in `_sum_exprs` plus its column. To add a ratio:
one entry in RATIOS (the read API's shape, `service.services.series`, names the
ones it answers).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import overload

import numpy as np
import numpy.typing as npt
import polars as pl

#: Why a reusable prefix was recomputed (contract section 4), in the order the
#: analytics decide them: a prompt too short for the provider to cache at all, a
#: concurrent cold start, a prefix the provider let expire (its TTL), routing to a
#: replica that never held it, eviction from the one that did, unknown without a
#: replica. The first two of the profile's causes need a caching profile (4a).
CAUSES: tuple[str, ...] = (
    "below_minimum",
    "concurrent",
    "expiry",
    "routing",
    "eviction",
    "unknown",
)

#: Per cause, the sums of its rewarms, of their tokens and of their wasted dollars.
REWARM_COLUMNS: tuple[str, ...] = tuple(f"rewarms_{c}" for c in CAUSES)
REWARM_TOKEN_COLUMNS: tuple[str, ...] = tuple(f"rewarm_tokens_{c}" for c in CAUSES)
WASTED_USD_COLUMNS: tuple[str, ...] = tuple(f"wasted_usd_{c}" for c in CAUSES)

Ints = npt.NDArray[np.int64]


@overload
def is_hit(cached_tokens: int, prompt_tokens: int) -> bool: ...
@overload
def is_hit(cached_tokens: Ints, prompt_tokens: Ints) -> npt.NDArray[np.bool_]: ...
def is_hit(cached_tokens: int | Ints, prompt_tokens: int | Ints) -> bool | npt.NDArray[np.bool_]:
    """A hit when at least half the input came from the cache (cached >= prompt / 2,
    in integers): the split that separates the two TTFT populations, as cached
    prefill is far faster. On ints or NumPy arrays."""
    return 2 * cached_tokens >= prompt_tokens


def _count_when(condition: pl.Expr, value: pl.Expr | int = 1) -> pl.Expr:
    value_expr = pl.lit(value) if isinstance(value, int) else value
    return pl.when(condition).then(value_expr).otherwise(0).sum().cast(pl.Int64)


def _sum_exprs() -> list[pl.Expr]:
    """The rollup sums as aggregations over per-request results joined with their
    records (`service.rollups.aggregate.join_results` gives the columns read here:
    `fingerprinted`, `rewarm_cause`, `session_continuation`, `opening`, `is_hit`).

    `fp_*` sum over fingerprinted requests only: the ceiling and the capture ratio
    compare tokens the fingerprints can speak for. `session_requests` counts the
    requests that continue a session with block hashes (not the openings): the ones
    whose history can be rewritten, the denominator of the rewrite share."""
    fp = pl.col("fingerprinted")
    opening_fp = fp & pl.col("opening")
    cause = pl.col("rewarm_cause")
    return [
        pl.len().cast(pl.Int64).alias("requests"),
        pl.col("prompt_tokens").sum().cast(pl.Int64),
        pl.col("cached_tokens").sum().cast(pl.Int64),
        _count_when(fp).alias("fp_requests"),
        _count_when(fp, pl.col("prompt_tokens")).alias("fp_prompt_tokens"),
        _count_when(fp, pl.col("cached_tokens")).alias("fp_cached_tokens"),
        pl.col("cacheable_tokens").sum().cast(pl.Int64),
        pl.col("rewarm_tokens").sum().cast(pl.Int64),
        *[_count_when(cause == c).alias(n) for c, n in zip(CAUSES, REWARM_COLUMNS, strict=True)],
        *[
            _count_when(cause == c, pl.col("rewarm_tokens")).alias(n)
            for c, n in zip(CAUSES, REWARM_TOKEN_COLUMNS, strict=True)
        ],
        _count_when(pl.col("session_continuation")).alias("session_requests"),
        _count_when(pl.col("history_rewrite")).alias("history_rewrites"),
        _count_when(opening_fp, pl.col("prompt_tokens")).alias("opening_fp_prompt_tokens"),
        _count_when(opening_fp, pl.col("cacheable_tokens")).alias("opening_cacheable_tokens"),
        _count_when(pl.col("is_hit")).alias("hits"),
        _count_when(~pl.col("is_hit")).alias("misses"),
        *_cost_exprs(),
        *_finding_exprs(),
        *_load_exprs(),
    ]


def _load_exprs() -> list[pl.Expr]:
    """`ttft_ms_total`: the callers' summed wait for the first token (ms; requests
    without `ttft_ms` add 0). With the prompt tokens it tells how busy a bucket was:
    by Little's law the requests waiting at once are the waits' sum over the bucket's
    length. A caller that waits for each answer (a chat user, an agent loop) sends
    fewer requests when every one of them misses and takes longer; its waiting time
    does not fall (docs/lab.md: on llama-server, 5 times fewer requests, the same
    summed wait). `service.detection.changepoints` reads it so that such a drop is
    not taken for a quiet night."""
    return [pl.col("ttft_ms").fill_null(0.0).sum().round(0).cast(pl.Int64).alias("ttft_ms_total")]


def _finding_exprs() -> list[pl.Expr]:
    """The sums the findings of contract section 5b read besides the above:
    requests that carried a `cache_key` (is routing ignoring one?), the prompt,
    rewarm tokens and wasted dollars of the history-rewriting requests, and the
    expiry rewarms whose carrier was at most twice the TTL before (`rewarm_gap_us`
    against the record's `ttl_s`): the ones a TTL twice as long would have kept."""
    rewrite = pl.col("history_rewrite")
    within_2ttl = (pl.col("rewarm_cause") == "expiry") & (
        pl.col("rewarm_gap_us") <= 2 * pl.col("ttl_s") * 1e6
    )
    return [
        _count_when(pl.col("cache_key").is_not_null()).alias("cache_key_requests"),
        _count_when(rewrite, pl.col("prompt_tokens")).alias("rewrite_prompt_tokens"),
        _count_when(rewrite, pl.col("rewarm_tokens")).alias("rewrite_rewarm_tokens"),
        pl.when(rewrite)
        .then(pl.col("wasted_usd").fill_null(0.0))
        .otherwise(0.0)
        .sum()
        .cast(pl.Float64)
        .alias("rewrite_wasted_usd"),
        _count_when(within_2ttl.fill_null(False)).alias("rewarms_expiry_2ttl"),
    ]


def _cost_exprs() -> list[pl.Expr]:
    """The sums of contract section 4a over the columns `service.analytics.costs`
    adds (`spend_usd`, `wasted_usd`: null for a request without prices).
    `priced_requests` counts the requests that had prices, so that a reader tells
    "no prices" (None) from "cost nothing" (0.0)."""
    cause = pl.col("rewarm_cause")
    wasted = pl.col("wasted_usd").fill_null(0.0)
    return [
        pl.col("cache_write_tokens").sum().cast(pl.Int64),
        pl.col("spend_usd").is_not_null().sum().cast(pl.Int64).alias("priced_requests"),
        pl.col("spend_usd").sum().cast(pl.Float64),
        pl.col("wasted_usd").sum().cast(pl.Float64),
        *[
            pl.when(cause == c).then(wasted).otherwise(0.0).sum().cast(pl.Float64).alias(n)
            for c, n in zip(CAUSES, WASTED_USD_COLUMNS, strict=True)
        ],
    ]


#: The sums as Polars aggregations, for `group_by(...).agg(SUMS)`.
SUMS: tuple[pl.Expr, ...] = tuple(_sum_exprs())
#: Their names: the additive columns of every rollup table, in this order.
SUM_COLUMNS: tuple[str, ...] = tuple(e.meta.output_name() for e in SUMS)
#: The sums of dollars (Float64); every other sum is an Int64 count.
USD_COLUMNS: tuple[str, ...] = (
    "spend_usd",
    "wasted_usd",
    *WASTED_USD_COLUMNS,
    "rewrite_wasted_usd",
)
#: Each sum's Polars type.
SUM_DTYPES: dict[str, pl.DataType] = {
    c: pl.Float64() if c in USD_COLUMNS else pl.Int64() for c in SUM_COLUMNS
}


@dataclass(frozen=True)
class Ratio:
    """A metric: `numerator / denominator`, both names of sums (or
    `distinct_prefixes`), None when the denominator is 0."""

    numerator: str
    denominator: str
    meaning: str


RATIOS: dict[str, Ratio] = {
    "hit_rate": Ratio(
        "cached_tokens",
        "prompt_tokens",
        "Share of input tokens the provider served from its prefix cache: what the "
        "caller got, and was billed the cached price for.",
    ),
    "cacheable_fraction": Ratio(
        "cacheable_tokens",
        "fp_prompt_tokens",
        "The ceiling: over fingerprinted requests, the share of input tokens whose "
        "prefix had been sent to the same model within W, the hit rate an infinite "
        "cache with perfect routing would reach. When it falls, the prompts changed.",
    ),
    "capture_ratio": Ratio(
        "fp_cached_tokens",
        "cacheable_tokens",
        "How much of the ceiling the serving side captured. When it falls with the "
        "ceiling intact, routing, eviction or cold fan-out lost reuse. Can exceed 1 "
        "when the provider keeps prefixes longer than W.",
    ),
    "rewarm_share": Ratio(
        "rewarm_tokens",
        "prompt_tokens",
        "Share of all input tokens recomputed although computed within W: the waste "
        "the rewarm causes split up.",
    ),
    "unique_prefix_ratio": Ratio(
        "distinct_prefixes",
        "fp_requests",
        "Distinct leading prefixes per fingerprinted request. Near 1: every request "
        "starts differently (a timestamp or request id at the top of the prompt).",
    ),
    "history_rewrite_share": Ratio(
        "history_rewrites",
        "session_requests",
        "Share of session continuations whose history was rewritten rather than "
        "appended to: each one loses its session's prefix.",
    ),
    "opening_cacheable_fraction": Ratio(
        "opening_cacheable_tokens",
        "opening_fp_prompt_tokens",
        "The ceiling over the first requests of sessions only: what a shared system "
        "prompt alone allows, undiluted by each session's own history.",
    ),
}


def ratio(numerator: float, denominator: float) -> float | None:
    """numerator / denominator (IEEE division: exact integers below 2**53 divide as
    Python's int / int), None when the denominator is 0."""
    return numerator / denominator if denominator else None


def ratios(values: Mapping[str, float], names: Iterable[str] = RATIOS) -> dict[str, float | None]:
    """The named RATIOS of one set of sums (and `distinct_prefixes` if one of them
    needs it)."""
    out: dict[str, float | None] = {}
    for name in names:
        r = RATIOS[name]
        out[name] = ratio(values[r.numerator], values[r.denominator])
    return out


def as_sum(name: str, value: Decimal | float | None) -> float | int:
    """A database's sum of the sum `name` as its Python type: PostgreSQL sums
    bigints as numeric (Decimal), so counts go back to int (exactly) and dollars to
    float; None (no rows) is 0."""
    number = 0 if value is None else value
    return float(number) if name in USD_COLUMNS else int(number)


def dollars(value: float, priced_requests: int) -> float | None:
    """A sum of dollars (USD_COLUMNS) as answered: None when no request it covers
    had prices (contract section 4a: costs are null, not 0, without prices)."""
    return float(value) if priced_requests else None


def dollars_expr(name: str) -> pl.Expr:
    """`dollars` over a frame of sums, one value per row, aliased `name`."""
    return (
        pl.when(pl.col("priced_requests") > 0)
        .then(pl.col(name).cast(pl.Float64))
        .otherwise(None)
        .alias(name)
    )


def ratio_expr(name: str) -> pl.Expr:
    """RATIOS[name] over a frame of sums, one value per row, aliased `name`; null
    where the denominator is 0 (as `ratio`)."""
    r = RATIOS[name]
    den = pl.col(r.denominator)
    return pl.when(den != 0).then(pl.col(r.numerator) / den).otherwise(None).alias(name)
