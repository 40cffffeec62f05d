"""Sums per bucket or group, and the metric formulas of contract section 4.

The service keeps per-request results next to the records and rolls them up (in
SQL or with `rollup`). Every metric is a ratio of sums, so sums are what a bucket
stores; ratios are taken last, with the functions below, which return None when
the denominator is 0 (no data is not a 0% hit rate). `distinct_first_keys` is
the exception: distinct counts do not add up across buckets, so a total over
several buckets must count again over their requests.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

#: Sums produced by `rollup`, per group.
SUM_COLUMNS = (
    "requests",
    "prompt_tokens",
    "cached_tokens",
    "hits",
    "misses",
    "fingerprinted_requests",
    "fingerprinted_prompt_tokens",
    "fingerprinted_cached_tokens",
    "cacheable_tokens",
    "rewarms",
    "rewarms_concurrent",
    "rewarms_routing",
    "rewarms_eviction",
    "rewarms_unknown",
    "rewarm_tokens",
    "session_requests",
    "history_rewrites",
    "opening_fingerprinted_prompt_tokens",
    "opening_cacheable_tokens",
    "distinct_first_keys",
)


def join_results(records: pl.DataFrame, results: pl.DataFrame) -> pl.DataFrame:
    """Records with their per-request results (inner join on `id`)."""
    return records.join(results.drop("ts_us", strict=False), on="id", how="inner")


def rollup(joined: pl.DataFrame, by: Sequence[str] = ()) -> pl.DataFrame:
    """SUM_COLUMNS per group of `by` (e.g. a bucket column, service, model) over a
    frame of records joined with their results; one row when `by` is empty."""
    fp = pl.col("fingerprinted")
    opening_fp = fp & pl.col("is_opening")
    first = pl.struct("first_key", "first_key_is_prefix")

    def count(cond: pl.Expr) -> pl.Expr:
        return cond.cast(pl.Int64).sum()

    def tokens(col: str, cond: pl.Expr) -> pl.Expr:
        return pl.col(col).fill_null(0).filter(cond).sum()

    aggs = [
        pl.len().cast(pl.Int64).alias("requests"),
        pl.col("prompt_tokens").fill_null(0).sum().alias("prompt_tokens"),
        pl.col("cached_tokens").fill_null(0).sum().alias("cached_tokens"),
        count(pl.col("is_hit")).alias("hits"),
        count(~pl.col("is_hit")).alias("misses"),
        count(fp).alias("fingerprinted_requests"),
        tokens("prompt_tokens", fp).alias("fingerprinted_prompt_tokens"),
        tokens("cached_tokens", fp).alias("fingerprinted_cached_tokens"),
        pl.col("cacheable_tokens").sum().alias("cacheable_tokens"),
        count(pl.col("is_rewarm")).alias("rewarms"),
        *(
            count(pl.col("rewarm_cause") == cause).alias(f"rewarms_{cause}")
            for cause in ("concurrent", "routing", "eviction", "unknown")
        ),
        pl.col("rewarm_tokens").sum().alias("rewarm_tokens"),
        count(pl.col("session_id").is_not_null()).alias("session_requests"),
        count(pl.col("history_rewrite")).alias("history_rewrites"),
        tokens("prompt_tokens", opening_fp).alias("opening_fingerprinted_prompt_tokens"),
        tokens("cacheable_tokens", opening_fp).alias("opening_cacheable_tokens"),
        first.filter(fp).n_unique().cast(pl.Int64).alias("distinct_first_keys"),
    ]
    if not by:
        return joined.select(aggs)
    return joined.group_by(list(by)).agg(aggs).sort(list(by))


def _ratio(num: float, den: float) -> float | None:
    return None if den == 0 else num / den


def hit_rate(cached_tokens: float, prompt_tokens: float) -> float | None:
    """Share of input tokens the provider served from its prefix cache: what the
    caller actually got (and was billed the cached price for)."""
    return _ratio(cached_tokens, prompt_tokens)


def cacheable_fraction(cacheable_tokens: float, fingerprinted_prompt_tokens: float) -> float | None:
    """Over fingerprinted requests, the share of input tokens whose prefix had been
    sent to the same model within W: the hit rate an infinite cache with perfect
    routing would reach, the ceiling the traffic itself allows. When it falls, the
    prompts changed (not the serving side)."""
    return _ratio(cacheable_tokens, fingerprinted_prompt_tokens)


def capture_ratio(fingerprinted_cached_tokens: float, cacheable_tokens: float) -> float | None:
    """How much of that ceiling the serving side captured: cached over cacheable
    tokens, fingerprinted requests only. When it falls with the ceiling intact,
    routing, eviction or cold fan-out lost reuse. Can exceed 1 when the provider
    keeps prefixes longer than W."""
    return _ratio(fingerprinted_cached_tokens, cacheable_tokens)


def rewarm_share(rewarm_tokens: float, prompt_tokens: float) -> float | None:
    """Share of all input tokens recomputed although computed within W: the waste
    the rewarm causes split up (contract section 5)."""
    return _ratio(rewarm_tokens, prompt_tokens)


def unique_prefix_ratio(distinct_first_keys: float, fingerprinted_requests: float) -> float | None:
    """Distinct first blocks (or prefix hashes) per fingerprinted request. Near 0:
    requests share a few starts; near 1: every request starts differently, e.g. a
    timestamp or request id at the top of the system prompt broke prefix reuse."""
    return _ratio(distinct_first_keys, fingerprinted_requests)


def history_rewrite_share(history_rewrites: float, session_requests: float) -> float | None:
    """Share of session requests whose history was rewritten rather than appended
    to (summaries, trimmed or reordered turns): each one loses its session's prefix."""
    return _ratio(history_rewrites, session_requests)


def is_hit(cached_tokens: int, prompt_tokens: int) -> bool:
    """A hit when at least half the input came from the cache: the split that
    separates the two TTFT populations (cached prefill is far faster)."""
    return 2 * cached_tokens >= prompt_tokens


def metrics(sums: Mapping[str, float]) -> dict[str, float | None]:
    """The ratios of one `rollup` row."""
    return {
        "hit_rate": hit_rate(sums["cached_tokens"], sums["prompt_tokens"]),
        "cacheable_fraction": cacheable_fraction(
            sums["cacheable_tokens"], sums["fingerprinted_prompt_tokens"]
        ),
        "capture_ratio": capture_ratio(
            sums["fingerprinted_cached_tokens"], sums["cacheable_tokens"]
        ),
        "rewarm_share": rewarm_share(sums["rewarm_tokens"], sums["prompt_tokens"]),
        "unique_prefix_ratio": unique_prefix_ratio(
            sums["distinct_first_keys"], sums["fingerprinted_requests"]
        ),
        "history_rewrite_share": history_rewrite_share(
            sums["history_rewrites"], sums["session_requests"]
        ),
        "opening_cacheable_fraction": cacheable_fraction(
            sums["opening_cacheable_tokens"], sums["opening_fingerprinted_prompt_tokens"]
        ),
    }
