"""Per-request segments -> the segment rollups (`service.models.SegmentRollup`): the
evidence of the `volatile_segment` and `template_drift` findings (contract 5b).

Only the *static* segments are kept: those before the request's first
`message[...]` (`tools`, `response_format`, `system`, ...), the start every request
of a service should share. Messages differ per conversation by nature.

`lost_tokens` estimates what a segment cost a request: the tokens of the static
start from the segment's own start to the static start's end that the request did
not reuse, max(0, static_end - max(start, reused)), with `reused` the larger of
its cacheable and cached tokens. A segment that varies makes every block after it
differ, so a request whose segment was stable (and warm) would have had those
tokens cacheable; one whose own variant was warm already loses nothing. It is an
estimate "from the blocks after it": nothing tells what the messages after the
static start would have shared.

Rows merge by adding, like every rollup. An hour that is over (every record of it
has been seen: a later one would make the pass rebuild it) is *compacted*: a
(service, model, name) with more than `FOLD_OVER` distinct hashes that hour keeps
as rows of their own only its hashes carrying at least `KEEP_SHARE` of its requests
(at most `KEEP`, the most used) and folds the others into one row with hash ''
whose `folded` counts them. Distinct hashes per hour stay exact (kept rows +
folded), and an hour of a segment holding a timestamp is one row, not one per
request. A template drift's variants (5% of the requests or more by default) keep
their rows; a `CACHEWATCH_FINDING_DRIFT_VARIANT_SHARE` below `KEEP_SHARE` would not
see, in such hours, the variants folded away.

Names and scenarios are capped from the first write (`capped`), as the groups'
values are (`service.rollups.groups`): a document id in a segment name, or a user id
in `scenario`, would otherwise make a row per request that no compaction folds. Per
hour and (service, model), at most `VALUES_KEPT` names and as many scenarios keep
rows of their own, the ones carried by the most requests: a name or scenario
already kept counts its hour so far plus the batch, a new one the batch alone (ties:
the one kept, then the smaller). The other names fold into one row per scenario with name
`FOLDED_NAME` and hash `FOLDED_HASH` (its `folded` counts the variant rows folded
in; no finding reads it), the other scenarios into `groups.OTHER`. A name kept all
hour has exact rows; the findings never read the folded name.
"""

from __future__ import annotations

import polars as pl

from service.rollups.groups import OTHER, kept_values
from service.timeunits import HOUR_US

#: A (service, model, name) with more distinct hashes than this in an hour that is
#: over keeps only its KEEP most used ones as rows of their own.
FOLD_OVER = 64
KEEP = 32
KEEP_SHARE = 0.01
#: The hash of the row holding the folded variants.
FOLDED_HASH = ""
#: Per hour and (service, model), the segment names and the scenarios kept as rows of
#: their own from the first write (`capped`); a stable service has a handful.
VALUES_KEPT = 64
#: The name of the row holding the names not kept: no segment has it (a name is 1 to
#: 200 characters).
FOLDED_NAME = ""

KEYS = ["bucket_us", "service", "model", "scenario", "name", "hash"]
GROUP = ["bucket_us", "service", "model", "name"]
COUNTS = ["folded", "requests", "prompt_tokens", "lost_tokens"]
SCHEMA: dict[str, pl.DataType] = {
    "bucket_us": pl.Int64(),
    "service": pl.String(),
    "model": pl.String(),
    "scenario": pl.String(),
    "name": pl.String(),
    "hash": pl.String(),
    "norm_hash": pl.String(),
    "tokens": pl.Int64(),
    "folded": pl.Int64(),
    "requests": pl.Int64(),
    "prompt_tokens": pl.Int64(),
    "lost_tokens": pl.Int64(),
}
_SEGMENT = pl.List(
    pl.Struct(
        {"name": pl.String(), "hash": pl.String(), "tokens": pl.Int64(), "norm_hash": pl.String()}
    )
)
_MESSAGE = "message["
#: The stored JSON from its first `message[...]` segment on, cut before decoding: a
#: long conversation's messages are most of the text, and none of them is read.
#: Segment objects are flat (no braces inside), so `[^{}]*` stays within one.
_FIRST_MESSAGE = r'\{[^{}]*"name"\s*:\s*"message\[.*$'
_MESSAGES_FIRST = r"(?s)^\[\s*" + _FIRST_MESSAGE  # the request starts with a message
_MESSAGES_AFTER = r"(?s),\s*" + _FIRST_MESSAGE


def empty() -> pl.DataFrame:
    return pl.DataFrame(schema=SCHEMA)


def static_segments(joined: pl.DataFrame) -> pl.DataFrame:
    """One row per (request, static segment): its hour, keys, tokens and lost tokens.

    `joined` holds records with their results (`service.rollups.aggregate`):
    `segments` as JSON text, `scenario`, `prompt_tokens`, `cached_tokens` and
    `cacheable_tokens`."""
    if "segments" not in joined.columns:
        return pl.DataFrame()
    carriers = joined.filter(pl.col("segments").is_not_null())
    if carriers.is_empty():
        return pl.DataFrame()
    requests = carriers.select(
        (pl.col("ts_us") // HOUR_US * HOUR_US).alias("bucket_us"),
        "service",
        "model",
        pl.col("scenario").fill_null(""),
        "prompt_tokens",
        pl.max_horizontal("cacheable_tokens", "cached_tokens").alias("reused"),
        pl.col("segments")
        .str.replace(_MESSAGES_FIRST, "[]")
        .str.replace(_MESSAGES_AFTER, "]")
        .alias("static_text"),
    )
    # Most requests of a service share their static start's text: each distinct one
    # is decoded once and joined back.
    texts = requests.select(pl.col("static_text").unique())
    parts = requests.join(_parsed(texts), on="static_text", how="inner")
    return parts.with_columns(
        (pl.col("static_end") - pl.max_horizontal("start", "reused"))
        .clip(lower_bound=0)
        .alias("lost_tokens")
    ).select(
        "bucket_us",
        "service",
        "model",
        "scenario",
        "name",
        "hash",
        "norm_hash",
        "tokens",
        "prompt_tokens",
        "lost_tokens",
    )


def _parsed(texts: pl.DataFrame) -> pl.DataFrame:
    """Per distinct `static_text`, one row per static segment: its name, hashes and
    tokens, where it starts, and where the static start ends."""
    element = pl.element().struct
    # Before the first message[...] (the cut leaves none unless the JSON was written
    # in another form); a prefix of each list.
    static = pl.col("segment").list.eval(
        element.field("name").str.starts_with(_MESSAGE).cum_sum() == 0
    )
    sizes = pl.col("segment").list.eval(element.field("tokens").fill_null(0))
    return (
        texts.with_columns(pl.col("static_text").str.json_decode(_SEGMENT).alias("segment"))
        .with_columns(static.alias("static"), sizes.alias("sizes"))
        .with_columns(
            pl.col("sizes").list.eval(pl.element().cum_sum() - pl.element()).alias("start"),
            (pl.col("sizes") * pl.col("static").list.eval(pl.element().cast(pl.Int64)))
            .list.sum()
            .alias("static_end"),
        )
        .explode(["segment", "start", "static"])
        .filter(pl.col("static").fill_null(False))
        .unnest("segment")
        .select(
            "static_text",
            "name",
            "hash",
            "norm_hash",
            pl.col("tokens").fill_null(0),
            "start",
            "static_end",
        )
    )


def segment_sums(joined: pl.DataFrame) -> pl.DataFrame:
    """The rollup rows of a batch: `static_segments` summed per hour and variant."""
    parts = static_segments(joined)
    if parts.is_empty():
        return empty()
    counted = parts.with_columns(pl.lit(0, pl.Int64).alias("folded"), pl.lit(1).alias("requests"))
    return _summed(counted.select(list(SCHEMA)).cast(SCHEMA))  # type: ignore[arg-type]


def merge(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """Rows of the same key added up (the tail the pass took back, and a batch)."""
    rows = pl.concat([f.select(list(SCHEMA)).cast(SCHEMA) for f in frames])  # type: ignore[arg-type]
    if rows.is_empty():
        return empty()
    return _summed(rows)


def _summed(rows: pl.DataFrame) -> pl.DataFrame:
    """One row per key: the counts added, a variant's norm_hash and tokens kept."""
    return (
        rows.group_by(KEYS)
        .agg(
            pl.col("norm_hash").drop_nulls().first(),
            pl.col("tokens").max(),
            *[pl.col(c).sum().cast(pl.Int64) for c in COUNTS],
        )
        .select(list(SCHEMA))
    )


def capped(stored: pl.DataFrame, batch: pl.DataFrame) -> pl.DataFrame:
    """The stored rows of some hours and a batch's rows merged, with per hour and
    (service, model) the names and then the scenarios beyond the `VALUES_KEPT`
    carried by the most requests folded (module docstring)."""
    stored, batch = (f.select(list(SCHEMA)).cast(SCHEMA) for f in (stored, batch))  # type: ignore[arg-type]
    kept = _kept(stored, batch, "name", FOLDED_NAME)
    stored, batch = (_fold_names(f, kept) for f in (stored, batch))
    kept = _kept(stored, batch, "scenario", "")
    renamed = [
        f.join(kept.with_columns(pl.lit(True).alias("_kept")), on=kept.columns, how="left")
        .with_columns(
            pl.when(pl.col("_kept") | (pl.col("scenario") == ""))
            .then(pl.col("scenario"))
            .otherwise(pl.lit(OTHER))
            .alias("scenario")
        )
        .drop("_kept")
        for f in (stored, batch)
    ]
    return merge(renamed)


def _kept(stored: pl.DataFrame, batch: pl.DataFrame, column: str, rest: str) -> pl.DataFrame:
    """Per hour and (service, model), the `VALUES_KEPT` values of `column` carried by
    the most requests (`groups.kept_values`); `rest` and `OTHER` are never
    candidates."""
    candidate = ~pl.col(column).is_in([rest, OTHER])
    hour = ["bucket_us", "service", "model"]
    return kept_values(
        stored.filter(candidate), batch.filter(candidate), hour, column, "requests", VALUES_KEPT
    )


def _fold_names(rows: pl.DataFrame, kept: pl.DataFrame) -> pl.DataFrame:
    """`rows` with those of names not `kept` summed into one row per hour, (service,
    model) and scenario, named `FOLDED_NAME`."""
    if rows.is_empty():
        return rows
    marked = rows.join(
        kept.with_columns(pl.lit(True).alias("_kept")), on=kept.columns, how="left"
    ).with_columns(pl.col("_kept").fill_null(False))
    folded = (
        marked.filter(~pl.col("_kept"))
        .group_by("bucket_us", "service", "model", "scenario")
        .agg(
            pl.lit(FOLDED_NAME).alias("name"),
            pl.lit(FOLDED_HASH).alias("hash"),
            pl.lit(None, pl.String).alias("norm_hash"),
            pl.col("tokens").max(),
            (pl.col("folded").sum() + (pl.col("hash") != FOLDED_HASH).sum())
            .cast(pl.Int64)
            .alias("folded"),
            *[pl.col(c).sum().cast(pl.Int64) for c in COUNTS if c != "folded"],
        )
        .select(list(SCHEMA))
    )
    return pl.concat([marked.filter(pl.col("_kept")).drop("_kept"), folded]).cast(SCHEMA)  # type: ignore[arg-type]


def compact(rows: pl.DataFrame, over_before_us: int) -> pl.DataFrame:
    """`rows` with every hour before `over_before_us` compacted (module docstring),
    its names and scenarios `capped` too (rows written before the cap, or without
    it). Hours from `over_before_us` on, and groups with few hashes, are left
    alone."""
    if rows.is_empty():
        return rows
    rows = pl.concat(
        [
            capped(rows.filter(pl.col("bucket_us") < over_before_us), empty()),
            rows.filter(pl.col("bucket_us") >= over_before_us).select(list(SCHEMA)),
        ]
    )
    over = rows.filter(pl.col("bucket_us") < over_before_us)
    rest = rows.filter(pl.col("bucket_us") >= over_before_us)
    variant = pl.col("hash") != FOLDED_HASH
    ranked = (
        over.filter(variant)
        .group_by([*GROUP, "hash"])
        .agg(pl.col("requests").sum())
        .sort([*GROUP, "requests", "hash"], descending=[False] * len(GROUP) + [True, False])
        .with_columns(
            pl.len().over(GROUP).alias("distinct"),
            (pl.int_range(pl.len()).over(GROUP) + 1).alias("rank"),
            (pl.col("requests") / pl.col("requests").sum().over(GROUP)).alias("share"),
        )
    )
    dropped = ranked.filter(
        (pl.col("distinct") > FOLD_OVER)
        & ((pl.col("rank") > KEEP) | (pl.col("share") < KEEP_SHARE))
    )
    if dropped.is_empty():
        return rows
    marked = over.join(
        dropped.select([*GROUP, "hash", pl.lit(True).alias("fold")]),
        on=[*GROUP, "hash"],
        how="left",
    ).with_columns((pl.col("fold").fill_null(False) | ~variant).alias("fold"))
    kept = marked.filter(~pl.col("fold")).drop("fold")
    folded = (
        marked.filter(pl.col("fold"))
        .group_by(GROUP)
        .agg(
            pl.lit("").alias("scenario"),
            pl.lit(FOLDED_HASH).alias("hash"),
            pl.lit(None, pl.String).alias("norm_hash"),
            pl.col("tokens").max(),
            # Distinct hashes folded now (each once, over scenarios) and before.
            (
                pl.col("hash").filter(pl.col("hash") != FOLDED_HASH).n_unique()
                + pl.col("folded").sum()
            )
            .cast(pl.Int64)
            .alias("folded"),
            *[pl.col(c).sum().cast(pl.Int64) for c in COUNTS if c != "folded"],
        )
        .select(list(SCHEMA))
    )
    return pl.concat([kept, folded, rest]).select(list(SCHEMA))
