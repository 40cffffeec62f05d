"""Per conversation (`session_id`): its calls, hit rate, dollars, and the cache
writes nobody read (`GET /v1/sessions`, docs/groups.md "Sessions"). Pure: a frame
of calls in, a frame of sessions out.

A call's cache writes are **unread** when the next call of its session to the same
model started more than the call's TTL after it (its `cache_ttl_s`, else its
caching profile's), or when no later call of its session came at all: the provider
kept them, was paid the write price for them, and let them expire. A model without
a TTL (a self-hosted engine) has no unread writes. What they wasted is the write
premium: unread tokens times (write price - input price), the part of the bill
that bought nothing (the tokens had to be processed anyway). This is what usage
alone tells, no fingerprint needed: the writes of a coding agent's session that
ends, or pauses past the TTL (a coffee break), are the classic case.
"""

from __future__ import annotations

import polars as pl

from service.analytics.costs import PRICE_COLUMNS, with_request_costs

#: The columns of a call that the report reads (besides the PRICE_COLUMNS and
#: `ttl_s` that `service.profiles` annotates).
CALL_COLUMNS: tuple[str, ...] = (
    "session_id",
    "service",
    "model",
    "provider",
    "tenant",
    "ts_us",
    "prompt_tokens",
    "cached_tokens",
    "cache_write_tokens",
    "cache_write_1h_tokens",
    "cache_ttl_s",
)
_US = 1_000_000
_PER_MTOK = 1e6


def unread_writes(calls: pl.DataFrame) -> pl.DataFrame:
    """`calls` (annotated with `ttl_s` and the PRICE_COLUMNS) with `unread_write_tokens`
    and `unread_write_usd` per call (module docstring)."""
    ordered = calls.sort("service", "session_id", "model", "ts_us")
    following = pl.col("ts_us").shift(-1).over("service", "session_id", "model")
    expired = following.is_null() | (following - pl.col("ts_us") > pl.col("ttl_s") * _US)
    written = pl.col("cache_write_tokens").fill_null(0)
    unread = pl.when(pl.col("ttl_s").is_not_null() & expired).then(written).otherwise(0)
    inp = pl.col("input_usd_per_mtok")
    premium = (pl.coalesce(pl.col("write_usd_per_mtok"), inp) - inp).clip(lower_bound=0)
    return ordered.with_columns(unread.alias("unread_write_tokens")).with_columns(
        (pl.col("unread_write_tokens") * premium / _PER_MTOK).alias("unread_write_usd")
    )


def session_totals(calls: pl.DataFrame) -> pl.DataFrame:
    """One row per (service, session_id), most spend first (then most prompt tokens,
    then the session id): requests, first and last call, models and tenant (in the
    order of their first call), token
    sums, hit rate, cache writes and the unread ones, spend and unread-write
    dollars (null where no call had prices)."""
    costs = with_request_costs(unread_writes(calls).with_columns(pl.lit(0).alias("rewarm_tokens")))
    priced = pl.col("spend_usd").is_not_null()
    sums = costs.group_by("service", "session_id").agg(
        pl.len().alias("requests"),
        pl.col("ts_us").min().alias("first_us"),
        pl.col("ts_us").max().alias("last_us"),
        pl.col("model").sort_by("ts_us").unique(maintain_order=True).alias("models"),
        pl.col("tenant").sort_by("ts_us").drop_nulls().first().alias("tenant"),
        *[pl.col(c).sum() for c in ("prompt_tokens", "cached_tokens")],
        pl.col("cache_write_tokens").fill_null(0).sum(),
        pl.col("unread_write_tokens").sum(),
        priced.sum().cast(pl.Int64).alias("priced_requests"),
        pl.col("spend_usd").sum(),
        pl.col("unread_write_usd").filter(priced).sum(),
    )
    dollars = [
        pl.when(pl.col("priced_requests") > 0).then(pl.col(c)).otherwise(None).alias(c)
        for c in ("spend_usd", "unread_write_usd")
    ]
    hit_rate = pl.when(pl.col("prompt_tokens") > 0).then(
        pl.col("cached_tokens") / pl.col("prompt_tokens")
    )
    return sums.with_columns(*dollars, hit_rate.alias("hit_rate")).sort(
        [pl.col("spend_usd").fill_null(-1.0), "prompt_tokens", "session_id"],
        descending=[True, True, False],
    )


def empty_calls() -> pl.DataFrame:
    """A frame of no calls, with the columns the report reads."""
    schema: dict[str, pl.DataType] = {
        "session_id": pl.String(),
        "service": pl.String(),
        "model": pl.String(),
        "provider": pl.String(),
        "tenant": pl.String(),
        "ts_us": pl.Int64(),
        "prompt_tokens": pl.Int64(),
        "cached_tokens": pl.Int64(),
        "cache_write_tokens": pl.Int64(),
        "cache_write_1h_tokens": pl.Int64(),
        "cache_ttl_s": pl.Float64(),
        "ttl_s": pl.Float64(),
        **{c: pl.Float64() for c in PRICE_COLUMNS},
    }
    return pl.DataFrame(schema=schema)
