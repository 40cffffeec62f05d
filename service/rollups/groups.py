"""Rollups per group (contract section 4b): for each (service, model) and each value
of `scenario`, `tenant` and `deploy`, per minute, what a chart row holds (the sums,
TTFT histograms, the replicas and leading prefixes as sets). Pure functions over
Polars frames; the chart rows of groups at every grain and filter level are derived
from these (`service.rollups.chart.from_rollups`), like the whole scope's from
`rollups`.

A group's requests keep the per-request values the pass computed for them against
every earlier request to the model, whoever sent them: the scope of reuse stays the
model, so a group's sums are exactly the sums of the records carrying its value.

Cardinality is the risk: a field such as `tenant` may hold user ids, 100,000 values
in an hour, most with a request now and then. So every hour holds, per (service,
model, group field), at most `keep` values of its own plus `OTHER`, from the first
write on (`choose`, `fold`):

* while the hour has fewer than `keep` values, a new value is admitted;
* after that, a pass ranks the values it writes into an hour by their prompt tokens
  in that hour: a kept value by its exact total so far plus the batch's, a new one
  by the batch's alone. The `keep` first stay (ties: the kept value, then the
  smaller); a kept value that falls out has its rows of the hour moved into
  `OTHER`, a new value that does not make it has its requests added to `OTHER`
  directly. Segment names are capped by the same rule (`kept_values`).

`OTHER` is the rest: per minute, the sums, histograms and sets of the requests of
every value not kept then. What is exact: the field's rows of an hour (kept values
and `OTHER`) add up to the (service, model)'s requests that carry the field, always;
a value's own numbers in an hour when it was kept all of that hour (a value
admitted during the hour has its earlier requests in `OTHER`; one evicted has the
whole hour there). One pass over a whole hour keeps exactly the `keep` busiest of
the hour. Cost: a pass reads the kept values' token counts of the hours it writes
(at most `keep` + 1 per field and minute) and folds its own records before making
any row, so it grows with the records it reads, never with their distinct values.
"""

import polars as pl

from service.analytics.definitions import SUM_COLUMNS, SUMS
from service.rollups import aggregate, chart
from service.timeunits import HOUR_US as _HOUR_US
from service.timeunits import MINUTE_US as _MINUTE_US

#: The columns a `group_rollups` row stores.
STORED = [
    "bucket_us",
    "service",
    "model",
    *chart.GROUP_KEYS,
    *SUM_COLUMNS,
    "ttft_hit",
    "ttft_miss",
    "replicas",
    "first_keys",
]
STORED_SCHEMA = {name: chart.CHART_SCHEMA[name] for name in STORED}
#: A group's rows before they are merged over replicas.
_KEYS = ["grain_s", "bucket_us", "service", "model", *chart.GROUP_KEYS, "replica"]
#: The group value standing for every value not kept in its (service, model, field)
#: and hour. Reserved: a record sending it is counted in the rest (docs/groups.md).
OTHER = "(other)"
#: What one hour's choice of values is made per.
CHOICE_KEYS = ["hour_us", "service", "model", "group_by"]
#: A value's prompt tokens in an hour: what `choose` ranks.
TOKENS_SCHEMA: dict[str, pl.DataType] = {
    "hour_us": pl.Int64(),
    "service": pl.String(),
    "model": pl.String(),
    "group_by": pl.String(),
    "group_value": pl.String(),
    "prompt_tokens": pl.Int64(),
}


def _read_columns() -> list[str]:
    """The joined columns the sums and the sets read."""
    names = {name for expr in SUMS for name in expr.meta.root_names()}
    return sorted(
        names | {"ts_us", "service", "model", "deploy", "replica", "ttft_ms", "first_key"}
    )


def per_group(joined: pl.DataFrame) -> pl.DataFrame:
    """A batch of records joined with their results (`aggregate.join_results`), each
    once per group field it carries a value of (`group_by`, `group_value`)."""
    columns = [c for c in _read_columns() if c in joined.columns]
    parts = [
        joined.filter(pl.col(by).is_not_null() & (pl.col(by) != "")).select(
            *columns,
            pl.lit(by, pl.Utf8).alias("group_by"),
            pl.col(by).cast(pl.Utf8).alias("group_value"),
        )
        for by in chart.GROUP_BYS
        if by in joined.columns
    ]
    return pl.concat(parts) if parts else pl.DataFrame()


def hour_tokens(frame: pl.DataFrame) -> pl.DataFrame:
    """Per hour, (service, model, field) and value, the prompt tokens of `frame`
    (requests `per_group`, or stored rows: both have `ts_us` or `bucket_us`).
    `OTHER` is left out: it is never a candidate."""
    if frame.is_empty():
        return pl.DataFrame(schema=TOKENS_SCHEMA)
    ts = "ts_us" if "ts_us" in frame.columns else "bucket_us"
    return (
        frame.filter(pl.col("group_value") != OTHER)
        .group_by(
            (pl.col(ts) // _HOUR_US * _HOUR_US).alias("hour_us"),
            "service",
            "model",
            *chart.GROUP_KEYS,
        )
        .agg(pl.col("prompt_tokens").sum().cast(pl.Int64))
        .select(list(TOKENS_SCHEMA))
    )


def choose(stored: pl.DataFrame, batch: pl.DataFrame, keep: int) -> pl.DataFrame:
    """The values kept (`hour_tokens` rows) per hour and (service, model, field),
    given the kept values' tokens so far (`stored`) and a batch's (`kept_values`)."""
    return kept_values(stored, batch, CHOICE_KEYS, "group_value", "prompt_tokens", keep)


def kept_values(
    stored: pl.DataFrame,
    batch: pl.DataFrame,
    per: list[str],
    value: str,
    measure: str,
    keep: int,
) -> pl.DataFrame:
    """The cap from the first write, for group values and segment names alike: per
    `per` key, the `keep` values of `value` with the most `measure`, a value already
    kept (in `stored`) counting its stored and batch rows, a new one its batch rows
    alone. Ties go to the kept value (a new one must have more to evict it), then to
    the smaller value, so a rerun keeps the same. Returns the (`per`, `value`) kept."""
    keys = [*per, value]
    both = pl.concat(
        [
            stored.select(*keys, measure, pl.lit(True).alias("stored")),
            batch.select(*keys, measure, pl.lit(False).alias("stored")),
        ]
    )
    return (
        both.group_by(keys)
        .agg(pl.col(measure).sum(), pl.col("stored").any())
        .sort(measure, "stored", value, descending=[True, True, False])
        .filter(pl.int_range(pl.len()).over(per) < keep)
        .select(keys)
    )


def fold(frame: pl.DataFrame, kept: pl.DataFrame) -> pl.DataFrame:
    """`frame` (requests `per_group`, or stored rows) with every value not `kept` in
    its hour renamed `OTHER` (rows of one key may then repeat: merge them)."""
    if frame.is_empty():
        return frame
    ts = "ts_us" if "ts_us" in frame.columns else "bucket_us"
    keys = [*CHOICE_KEYS, "group_value"]
    marked = frame.with_columns((pl.col(ts) // _HOUR_US * _HOUR_US).alias("hour_us")).join(
        kept.with_columns(pl.lit(True).alias("_kept")), on=keys, how="left", maintain_order="left"
    )
    value = pl.when(pl.col("_kept")).then(pl.col("group_value")).otherwise(pl.lit(OTHER))
    return marked.with_columns(value.alias("group_value")).select(frame.columns)


def evicted_from(stored: pl.DataFrame, kept: pl.DataFrame) -> int | None:
    """The first minute of the stored rows (`bucket_us` and the keys) of a value that
    is no longer kept (`choose`), whose rows must move into `OTHER`; None if none."""
    if stored.is_empty():
        return None
    own = stored.filter(pl.col("group_value") != OTHER)
    moved = fold(own, kept).filter(pl.col("group_value") == OTHER)
    return None if moved.is_empty() else int(moved["bucket_us"].min())  # type: ignore[arg-type]


def minute_rows(joined: pl.DataFrame, kept: pl.DataFrame | None = None) -> pl.DataFrame:
    """The groups' minute rows of a batch of records joined with their results
    (`aggregate.join_results`); with `kept` (`choose`), the values not kept folded
    into `OTHER` first."""
    return rows_of(per_group(joined), kept)


def whole_hours_rows(joined: pl.DataFrame, keep: int) -> pl.DataFrame:
    """`minute_rows` of a batch holding whole hours (nothing of them stored): each
    hour's `keep` values with the most prompt tokens, the rest in `OTHER`."""
    long = per_group(joined)
    tokens = hour_tokens(long)
    return rows_of(long, choose(tokens.clear(), tokens, keep))


def rows_of(long: pl.DataFrame, kept: pl.DataFrame | None = None) -> pl.DataFrame:
    """`minute_rows` of requests already `per_group`."""
    if long.is_empty():
        return pl.DataFrame(schema=STORED_SCHEMA)
    if kept is not None:
        long = fold(long, kept)
    rows = aggregate.finish(
        aggregate.rollup_sums(long, 60, _KEYS), aggregate.ttft_counts(long, 60, _KEYS), _KEYS
    )
    prefixes = (
        long.filter(pl.col("first_key").is_not_null())
        .select(
            (pl.col("ts_us") // _MINUTE_US * _MINUTE_US).alias("bucket_us"),
            "service",
            "model",
            *chart.GROUP_KEYS,
            "first_key",
        )
        .unique()
    )
    return chart.level_zero(rows, prefixes, 60).select(STORED)


def merge(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """Minute rows of the same groups and minutes merged into one each (a batch's
    rows with the stored tail it continues)."""
    parts = [f.select(STORED) for f in frames if not f.is_empty()]
    if not parts:
        return pl.DataFrame(schema=STORED_SCHEMA)
    rows = pl.concat(parts, how="vertical")
    level = rows.with_columns(pl.lit(0, pl.Int32).alias("level"))
    return chart.merge_rows(level, 60).select(STORED)


def compact(rows: pl.DataFrame, keep: int) -> pl.DataFrame:
    """`rows` with, per hour, (service, model) and group field, the values beyond the
    `keep` with the most prompt tokens in the hour (ties: the smaller value) folded
    into `OTHER`: the cap of rows written before it applied from the first write
    (or by `minute_rows` without `kept`). Totals stay exact."""
    if rows.is_empty():
        return rows
    tokens = hour_tokens(rows)
    kept = choose(tokens.clear(), tokens, keep)
    if kept.height == tokens.height:
        return rows
    return merge([fold(rows, kept)])
