"""What cachewatch found for each request its provider diagnosed: a pure function
over the pass's per-request results joined with their records
(`service.rollups.aggregate.join_results`).

The verdict, first that holds (`service.diagnoses.reasons` names them):

1. `unfingerprinted`: no block hashes and no prefix hash;
2. a rewarm: its cause under a regression's name (`concurrent` is `cold_fanout`):
   the start was unchanged and reusable, and the cache did not serve it;
3. `prefix_instability`: the first block nothing recent carried lies in a segment
   before the first message (or at the prompt's first token, for a request
   without segments); a session's request whose start changed is also a
   history rewrite by contract section 4's rule, but the change is its start's;
4. `history_rewrite`: the request rewrote its session's history;
5. `none`: the start was reused; only what follows it is new.

Where the change lies: the request's first unseen block is
[cacheable_tokens, cacheable_tokens + block_size) (a prefix-only request's one
block is its prefix), when the prompt fills it (one the caller hashed: the
stored row keeps no count of hashes on every backend, so a caller that hashed
fewer blocks than its prompt fills is read as if it had hashed them all), and
its segments (each `tokens` long, in order) overlapping
that block are where the start first differs from everything seen within W. A
block holds up to block_size tokens of two segments, so a change at a boundary is
placed in both (`tools+system`); the agreement counts either. `at_start`: not one
block of the prompt was reusable (a new model's cache is empty: how cachewatch
sees `model_changed`). A prompt reused to its end has no such block: segment ''.
"""

from __future__ import annotations

import polars as pl

from service.detection.diagnosis import REWARM_CAUSE_NAMES, UNKNOWN
from service.diagnoses.reasons import (
    HISTORY_REWRITE,
    MESSAGE_PREFIX,
    NOTHING_LOST,
    PREFIX_CHANGED,
    SEGMENT_CLASSES,
    SEGMENT_JOIN,
    UNFINGERPRINTED,
)

_SEGMENTS = pl.List(pl.Struct({"name": pl.String(), "tokens": pl.Int64()}))

#: One row per diagnosed request.
VERDICT_SCHEMA: dict[str, pl.DataType] = {
    "ts_us": pl.Int64(),
    "service": pl.String(),
    "model": pl.String(),
    "reason": pl.String(),
    "verdict": pl.String(),
    "segment": pl.String(),
    "at_start": pl.Boolean(),
    "missed_tokens": pl.Int64(),
    "prompt_tokens": pl.Int64(),
    "cached_tokens": pl.Int64(),
}


def verdicts(joined: pl.DataFrame) -> pl.DataFrame:
    """The verdict of every request of `joined` that carries a provider diagnosis."""
    if "provider_miss_reason" not in joined.columns:
        return pl.DataFrame(schema=VERDICT_SCHEMA)
    diagnosed = joined.filter(pl.col("provider_miss_reason").is_not_null())
    if diagnosed.is_empty():
        return pl.DataFrame(schema=VERDICT_SCHEMA)
    block = pl.when(pl.col("block_hashes").is_not_null()).then(pl.col("block_size"))
    rows = diagnosed.with_row_index("row").with_columns(
        pl.col("cacheable_tokens").alias("first_unseen"),
        block.otherwise(pl.col("prefix_tokens")).fill_null(0).alias("block_tokens"),
    )
    located = _located(rows)
    return (
        rows.join(located, on="row", how="left")
        .with_columns(pl.col("segment").fill_null(""), pl.col("static").fill_null(False))
        .select(
            "ts_us",
            "service",
            "model",
            pl.col("provider_miss_reason").alias("reason"),
            _verdict().alias("verdict"),
            pl.when(pl.col("fingerprinted")).then(pl.col("segment")).otherwise(pl.lit("")),
            (pl.col("fingerprinted") & (pl.col("first_unseen") == 0)).alias("at_start"),
            pl.col("provider_missed_tokens").fill_null(0).alias("missed_tokens"),
            "prompt_tokens",
            "cached_tokens",
        )
        .cast(VERDICT_SCHEMA)  # type: ignore[arg-type]
    )


def _verdict() -> pl.Expr:
    cause = pl.col("rewarm_cause").replace_strict(
        REWARM_CAUSE_NAMES, default=UNKNOWN, return_dtype=pl.String
    )
    unseen = _has_unseen_block()
    changed_start = pl.col("static") | (
        (pl.col("segment") == "") & (pl.col("first_unseen") == 0) & unseen
    )
    return (
        pl.when(~pl.col("fingerprinted"))
        .then(pl.lit(UNFINGERPRINTED))
        .when(pl.col("is_rewarm"))
        .then(cause)
        .when(changed_start)
        .then(pl.lit(PREFIX_CHANGED))
        .when(pl.col("history_rewrite").fill_null(False))
        .then(pl.lit(HISTORY_REWRITE))
        .otherwise(pl.lit(NOTHING_LOST))
    )


def _has_unseen_block() -> pl.Expr:
    """The prompt fills a whole block after its seen ones: one the request hashed
    and nothing recent carried (a prompt hashed to its last full block and reused
    to it has none; its tail after that block was never hashed)."""
    return pl.col("first_unseen") + pl.max_horizontal("block_tokens", 1) <= pl.col("prompt_tokens")


def _located(rows: pl.DataFrame) -> pl.DataFrame:
    """Per row with segments and an unseen block: the classes of the segments that
    block overlaps (`segment`) and whether the first is before the messages
    (`static`)."""
    carriers = rows.filter(pl.col("segments").is_not_null() & _has_unseen_block())
    if carriers.is_empty():
        return pl.DataFrame(
            schema={"row": pl.UInt32(), "segment": pl.String(), "static": pl.Boolean()}
        )
    parts = (
        carriers.select(
            "row",
            "first_unseen",
            pl.max_horizontal("block_tokens", 1).alias("block_tokens"),
            pl.col("segments").str.json_decode(_SEGMENTS).alias("segment"),
        )
        .explode("segment")
        .unnest("segment")
        .with_columns(pl.col("tokens").fill_null(0))
        .with_columns((pl.col("tokens").cum_sum() - pl.col("tokens")).over("row").alias("start"))
    )
    block_end = pl.col("first_unseen") + pl.col("block_tokens")
    overlapping = parts.filter(
        (pl.col("start") < block_end)
        & (pl.col("start") + pl.col("tokens") > pl.col("first_unseen"))
        & pl.col("name").is_not_null()
    ).with_columns(_class().alias("class"))
    return overlapping.group_by("row", maintain_order=True).agg(
        pl.col("class").unique(maintain_order=True).str.join(SEGMENT_JOIN).alias("segment"),
        (~pl.col("name").first().str.starts_with(MESSAGE_PREFIX)).alias("static"),
    )


def _class() -> pl.Expr:
    """`reasons.segment_class`, as an expression."""
    name = pl.col("name")
    known = pl.when(name.is_in(list(SEGMENT_CLASSES))).then(name).otherwise(pl.lit("other"))
    return pl.when(name.str.starts_with(MESSAGE_PREFIX)).then(pl.lit("messages")).otherwise(known)
