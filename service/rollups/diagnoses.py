"""Per-request verdicts of diagnosed requests (`service.diagnoses.verdicts`) ->
the diagnosis rollups (`service.models.DiagnosisRollup`): per hour, (service,
model), the provider's reason, cachewatch's verdict and segment, and whether the
request rewrote its session's history by contract section 4's rule (the
`history_rewrite` finding's requests, whatever their verdict), their counts
summed. Rows merge by adding, like every rollup. The keys are few by
construction: a reason is one of a provider's dozen (an unknown one is kept as
sent, at most 50 characters), a verdict one of eleven, a segment a join of at
most five classes."""

from __future__ import annotations

import polars as pl

from service.diagnoses.verdicts import VERDICT_SCHEMA, verdicts
from service.timeunits import HOUR_US

#: A verdict's columns (`VERDICT_SCHEMA`), its hour for its time, and a count.
SCHEMA: dict[str, pl.DataType] = {
    "bucket_us": pl.Int64(),
    **{k: t for k, t in VERDICT_SCHEMA.items() if k != "ts_us"},
    "requests": pl.Int64(),
}
COUNTS = [c for c, t in SCHEMA.items() if c != "bucket_us" and t == pl.Int64()]
KEYS = [c for c in SCHEMA if c not in COUNTS]


def empty() -> pl.DataFrame:
    return pl.DataFrame(schema=SCHEMA)


def diagnosis_sums(joined: pl.DataFrame) -> pl.DataFrame:
    """The rollup rows of a batch of records joined with their results."""
    found = verdicts(joined)
    if found.is_empty():
        return empty()
    rows = found.with_columns(
        (pl.col("ts_us") // HOUR_US * HOUR_US).alias("bucket_us"), pl.lit(1).alias("requests")
    )
    return merge([rows])


def merge(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """Rows of the same key added up (the tail taken back, and a batch)."""
    rows = pl.concat([f.select(list(SCHEMA)).cast(SCHEMA) for f in frames])  # type: ignore[arg-type]
    if rows.is_empty():
        return empty()
    return rows.group_by(KEYS).agg([pl.col(c).sum().cast(pl.Int64) for c in COUNTS]).sort(KEYS)
