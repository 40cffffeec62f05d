"""Per-request analytics results -> rollup rows, and merging rollup rows.

Input frame columns (records joined with `service.analytics` results): ts_us,
service, model, deploy, replica, prompt_tokens, cached_tokens, ttft_ms,
fingerprinted, cacheable_tokens, rewarm_tokens, rewarm_cause, history_rewrite,
session_continuation, opening, is_hit, first_key."""

import polars as pl

from service.analytics.costs import with_request_costs
from service.analytics.definitions import SUM_COLUMNS, SUMS
from service.rollups import histogram

ROLLUP_KEYS = ["grain_s", "bucket_us", "service", "model", "deploy", "replica"]
PREFIX_KEYS = ["grain_s", "bucket_us", "service", "model", "first_key", "replica"]


#: Record columns the sums read that a record frame may leave out (all null then):
#: frames built by hand (tests, benches) rather than by the repository.
OPTIONAL_COLUMNS: dict[str, pl.DataType] = {"cache_key": pl.String(), "ttl_s": pl.Float64()}


def join_results(records: pl.DataFrame, results: pl.DataFrame) -> pl.DataFrame:
    """Each record with its per-request values (service.analytics), its costs
    (service.analytics.costs, from the record's price columns if it has them) and
    the two flags the rollup sums are conditioned on: what every rollup below
    aggregates."""
    missing = [
        pl.lit(None, dtype).alias(name)
        for name, dtype in OPTIONAL_COLUMNS.items()
        if name not in records.columns
    ]
    joined = (
        records.drop("ts_us")
        .with_columns(missing)
        .join(results, on="id", how="inner")
        .with_columns(
            (
                pl.col("session_id").is_not_null()
                & ~pl.col("is_opening")
                & pl.col("block_hashes").is_not_null()
            ).alias("session_continuation"),
            pl.col("is_opening").alias("opening"),
        )
    )
    return with_request_costs(joined)


def _bucketed(frame: pl.DataFrame, grain_s: int) -> pl.DataFrame:
    grain_us = grain_s * 1_000_000
    return frame.with_columns(
        pl.lit(grain_s, pl.Int32).alias("grain_s"),
        ((pl.col("ts_us") // grain_us) * grain_us).alias("bucket_us"),
        pl.col("deploy").fill_null(""),
        pl.col("replica").fill_null(""),
    )


def rollup_sums(frame: pl.DataFrame, grain_s: int, keys: list[str] = ROLLUP_KEYS) -> pl.DataFrame:
    return _bucketed(frame, grain_s).group_by(keys).agg(SUMS)


def ttft_counts(frame: pl.DataFrame, grain_s: int, keys: list[str] = ROLLUP_KEYS) -> pl.DataFrame:
    """Long form (keys, is_hit, bin, count): the mergeable shape of TTFT histograms."""
    return (
        _bucketed(frame, grain_s)
        .filter(pl.col("ttft_ms").is_not_null())
        .with_columns(histogram.bin_expr(pl.col("ttft_ms")).alias("bin"))
        .group_by([*keys, "is_hit", "bin"])
        .agg(pl.len().cast(pl.Int64).alias("count"))
    )


def prefix_sums(frame: pl.DataFrame, grain_s: int) -> pl.DataFrame:
    return (
        _bucketed(frame, grain_s)
        .filter(pl.col("first_key").is_not_null())
        .group_by(PREFIX_KEYS)
        .agg(
            pl.len().cast(pl.Int64).alias("requests"),
            pl.col("prompt_tokens").sum().cast(pl.Int64),
            pl.col("cached_tokens").sum().cast(pl.Int64),
            pl.col("cacheable_tokens").sum().cast(pl.Int64),
            pl.col("rewarm_cause").is_not_null().sum().cast(pl.Int64).alias("rewarms"),
            pl.col("rewarm_tokens").sum().cast(pl.Int64),
        )
    )


def explode_histograms(rows: pl.DataFrame) -> pl.DataFrame:
    """Stored rollup rows -> long-form TTFT counts, to merge with new ones."""
    parts = []
    for outcome, column in ((True, "ttft_hit"), (False, "ttft_miss")):
        for row in rows.select([*ROLLUP_KEYS, column]).iter_rows(named=True):
            bins, counts = histogram.decode(row[column])
            if len(bins):
                keys = {k: row[k] for k in ROLLUP_KEYS}
                parts.append(
                    pl.DataFrame({"bin": bins, "count": counts.astype("int64")}).with_columns(
                        *[pl.lit(v).alias(k) for k, v in keys.items()],
                        pl.lit(outcome).alias("is_hit"),
                    )
                )
    return pl.concat(parts, how="diagonal_relaxed") if parts else _empty_counts()


def _empty_counts() -> pl.DataFrame:
    return pl.DataFrame(
        schema={
            "grain_s": pl.Int32,
            "bucket_us": pl.Int64,
            "service": pl.Utf8,
            "model": pl.Utf8,
            "deploy": pl.Utf8,
            "replica": pl.Utf8,
            "is_hit": pl.Boolean,
            "bin": pl.UInt16,
            "count": pl.Int64,
        }
    )


def finish(sums: pl.DataFrame, counts: pl.DataFrame, keys: list[str] = ROLLUP_KEYS) -> pl.DataFrame:
    """Rollup rows ready to store: sums (summed again per key, so several partial
    frames may be concatenated first) with their encoded TTFT histograms."""
    totals = sums.group_by(keys).agg(pl.col(SUM_COLUMNS).sum())
    counts = counts.with_columns(pl.col("grain_s").cast(pl.Int32), pl.col("bin").cast(pl.UInt16))
    merged = counts.group_by([*keys, "is_hit", "bin"]).agg(pl.col("count").sum())
    encoded = merged.group_by([*keys, "is_hit"]).agg(pl.col("bin"), pl.col("count"))
    blobs = {True: {}, False: {}}  # type: dict[bool, dict[tuple[object, ...], bytes]]
    for row in encoded.iter_rows(named=True):
        key = tuple(row[k] for k in keys)
        blobs[row["is_hit"]][key] = histogram.encode(row["bin"], row["count"])
    rows = totals.select(keys).rows()
    return totals.with_columns(
        pl.Series("ttft_hit", [blobs[True].get(k) for k in rows], pl.Binary),
        pl.Series("ttft_miss", [blobs[False].get(k) for k in rows], pl.Binary),
    )


def merge_prefix(frames: list[pl.DataFrame]) -> pl.DataFrame:
    combined = pl.concat(frames, how="diagonal_relaxed")
    value_columns = [c for c in combined.columns if c not in PREFIX_KEYS and c != "id"]
    return combined.group_by(PREFIX_KEYS).agg(pl.col(value_columns).sum())
