"""Rollups per group (contract section 4b): for each (service, model) and each value
of `scenario`, `tenant` and `deploy`, per minute, what a chart row holds (the sums,
TTFT histograms, the replicas and leading prefixes as sets). Pure functions over
Polars frames; the chart rows of groups at every grain and filter level are derived
from these (`service.rollups.chart.from_rollups`), like the whole scope's from
`rollups`.

A group's requests keep the per-request values the pass computed for them against
every earlier request to the model, whoever sent them: the scope of reuse stays the
model, so a group's sums are exactly the sums of the records carrying its value.

Cardinality is the risk: a field such as `tenant` may take 50,000 values, most with
a request now and then. An hour that is over (`compact`) keeps, per (service, model,
group field), the `keep` values with the most prompt tokens in that hour and drops
the others' rows, so a finished hour holds at most `keep` series per field however
many values it saw; the hour still open holds every value it has seen so far (at
most one row per request). A group that is among the busiest every hour (the ones
detection watches) is complete; one that is not has its quiet hours missing, and
reads say so by counting only what is kept (docs/groups.md).
"""

import polars as pl

from service.analytics.definitions import SUM_COLUMNS, SUMS
from service.rollups import aggregate, chart

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
_MINUTE_US = 60 * 1_000_000
_HOUR_US = 60 * _MINUTE_US


def _read_columns() -> list[str]:
    """The joined columns the sums and the sets read."""
    names = {name for expr in SUMS for name in expr.meta.root_names()}
    return sorted(
        names | {"ts_us", "service", "model", "deploy", "replica", "ttft_ms", "first_key"}
    )


def _long(joined: pl.DataFrame) -> pl.DataFrame:
    """Each request once per group field it carries a value of."""
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


def minute_rows(joined: pl.DataFrame) -> pl.DataFrame:
    """The groups' minute rows of a batch of records joined with their results
    (`aggregate.join_results`)."""
    long = _long(joined)
    if long.is_empty():
        return pl.DataFrame(schema=STORED_SCHEMA)
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
    """The rows of finished hours that stay: per hour, (service, model) and group
    field, those of the `keep` values with the most prompt tokens in the hour (ties:
    the smaller value, so a rerun keeps the same ones)."""
    if rows.is_empty():
        return rows
    hour = (pl.col("bucket_us") // _HOUR_US).alias("hour")
    per_value = (
        rows.group_by(hour, "service", "model", *chart.GROUP_KEYS)
        .agg(pl.col("prompt_tokens").sum())
        .sort("prompt_tokens", "group_value", descending=[True, False])
        .with_columns(
            pl.int_range(1, pl.len() + 1).over("hour", "service", "model", "group_by").alias("rank")
        )
        .filter(pl.col("rank") <= keep)
        .select("hour", "service", "model", *chart.GROUP_KEYS)
    )
    return (
        rows.with_columns(hour)
        .join(per_value, on=["hour", "service", "model", *chart.GROUP_KEYS], how="semi")
        .drop("hour")
    )
