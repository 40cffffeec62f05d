"""What cachewatch found for each request its provider diagnosed: a pure function
over the pass's per-request results joined with their records
(`service.rollups.aggregate.join_results`).

Where the request's prompt first differs, as the provider compares it (with the
session's previous request): a request that rewrote its session's history (its
leading blocks in common with that request fall short of the rewrite rule's k)
differs at block `session_common_blocks`; any other, at its first block nothing
within W carried (block `seen_blocks`, token `cacheable_tokens`; a prefix-only
request's one block is its prefix), when the prompt fills that block (one the
caller hashed: the stored row keeps no count of hashes on every backend, so a
caller that hashed fewer blocks than its prompt fills is read as if it had hashed
them all). The segments (each `tokens` long, in order) that block overlaps are
where: a block holds up to block_size tokens of two segments, so a change at a
boundary is placed in both (`tools+system`), and the agreement counts either.

The verdict, first that holds (`service.diagnoses.reasons` names them): what
changed comes before what the cache lost, as the provider's question is what
changed (a change on a turn whose reusable start also expired is the change):

1. `model_switch`: the session's previous request went to another model (each
   model's cache is its own: nothing of the session's is there), known from the
   records alone, fingerprinted or not;
2. `unfingerprinted`: no block hashes and no prefix hash;
3. `prefix_instability`: the first segment of that block comes before the first
   message (or, for a request without segments, the block is its first): the
   start changed. A session's request whose start changed is also a history
   rewrite by contract section 4's rule, but the change is its start's;
4. `history_rewrite`: the request rewrote its session's history;
5. a rewarm: its cause under a regression's name (`concurrent` is `cold_fanout`):
   the start was unchanged and reusable, and the cache did not serve it;
6. `none`: the start was reused; only what follows it is new.

A prompt with no such block has segment ''.
"""

from __future__ import annotations

import polars as pl

from service.detection.diagnosis import REWARM_CAUSE_NAMES, UNKNOWN
from service.diagnoses.reasons import (
    HISTORY_REWRITE,
    MESSAGES,
    MODEL_SWITCH,
    NOTHING_LOST,
    PREFIX_CHANGED,
    SEGMENT_JOIN,
    UNFINGERPRINTED,
    segment_class,
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
    "history_rewrite": pl.Boolean(),
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
    rows = diagnosed.with_row_index("row").with_columns(_divergence())
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
            pl.col("history_rewrite").fill_null(False),
            pl.col("provider_missed_tokens").fill_null(0).alias("missed_tokens"),
            "prompt_tokens",
            "cached_tokens",
        )
        .cast(VERDICT_SCHEMA)  # type: ignore[arg-type]
    )


def _divergence() -> list[pl.Expr]:
    """`block_tokens`, the block's length; `at`, the token the differing block
    starts at; `differs`, whether there is such a block (module docstring)."""
    with_blocks = pl.col("block_hashes").is_not_null()
    size = pl.when(with_blocks).then(pl.col("block_size")).otherwise(pl.col("prefix_tokens"))
    block = pl.max_horizontal(size.fill_null(0), 1)
    rewrote = (
        pl.col("history_rewrite").fill_null(False) & pl.col("session_common_blocks").is_not_null()
    )
    at = pl.when(rewrote).then(pl.col("session_common_blocks") * block)
    unseen = pl.col("cacheable_tokens") + block <= pl.col("prompt_tokens")
    return [
        block.alias("block_tokens"),
        at.otherwise(pl.col("cacheable_tokens")).alias("at"),
        (rewrote | unseen).alias("differs"),
    ]


def _verdict() -> pl.Expr:
    cause = pl.col("rewarm_cause").replace_strict(
        REWARM_CAUSE_NAMES, default=UNKNOWN, return_dtype=pl.String
    )
    first_block = (pl.col("segment") == "") & (pl.col("at") == 0) & pl.col("differs")
    return (
        pl.when(pl.col("session_model_changed").fill_null(False))
        .then(pl.lit(MODEL_SWITCH))
        .when(~pl.col("fingerprinted"))
        .then(pl.lit(UNFINGERPRINTED))
        .when(pl.col("static") | first_block)
        .then(pl.lit(PREFIX_CHANGED))
        .when(pl.col("history_rewrite").fill_null(False))
        .then(pl.lit(HISTORY_REWRITE))
        .when(pl.col("is_rewarm"))
        .then(cause)
        .otherwise(pl.lit(NOTHING_LOST))
    )


def _located(rows: pl.DataFrame) -> pl.DataFrame:
    """Per row with segments and an unseen block: the classes of the segments that
    block overlaps (`segment`) and whether the first is before the messages
    (`static`)."""
    carriers = rows.filter(pl.col("segments").is_not_null() & pl.col("differs"))
    if carriers.is_empty():
        return pl.DataFrame(
            schema={"row": pl.UInt32(), "segment": pl.String(), "static": pl.Boolean()}
        )
    parts = (
        carriers.select(
            "row",
            "at",
            "block_tokens",
            pl.col("segments").str.json_decode(_SEGMENTS).alias("segment"),
        )
        .explode("segment")
        .unnest("segment")
        .with_columns(pl.col("tokens").fill_null(0))
        .with_columns((pl.col("tokens").cum_sum() - pl.col("tokens")).over("row").alias("start"))
    )
    block_end = pl.col("at") + pl.col("block_tokens")
    overlapping = parts.filter(
        (pl.col("start") < block_end)
        & (pl.col("start") + pl.col("tokens") > pl.col("at"))
        & pl.col("name").is_not_null()
    )
    names = overlapping.select(pl.col("name").unique())
    classes = names.with_columns(
        pl.Series("class", [segment_class(n) for n in names["name"]], pl.String)
    )
    return (
        overlapping.join(classes, on="name", how="left")
        .sort("row", "start")
        .group_by("row", maintain_order=True)
        .agg(
            pl.col("class").unique(maintain_order=True).str.join(SEGMENT_JOIN).alias("segment"),
            (pl.col("class").first() != MESSAGES).alias("static"),
        )
    )
