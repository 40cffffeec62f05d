"""Chart rollups: `rollups` rows merged per time bucket and filter scope, the rows the
read path (`/v1/metrics`, the dashboard) reads. Pure functions over Polars frames.

Why: a month of per-(service, model, deploy, replica) minute rows is millions of
rows, and a chart needs one value per bucket. Each chart row answers one filter
scope directly (`level`: 0 = one service and model, 1 = one service, 2 = one model,
3 = everything, the unfiltered key being ''), at grains of 1 minute, 5 minutes, 1
hour and 1 day, so a request reads about one row per bucket it returns.

Every value must merge exactly, or a coarser row would not equal the finer rows it
replaces: the sums add; TTFT histograms add bin by bin; the two distinct counts
(replicas serving, distinct leading prefixes) do not add, so their sets are kept and
merged by union. Sets stay small where it matters: a bucket holds the replicas
that served it, and the leading prefixes (a few system prompts in healthy traffic;
one per request only in the anti-pattern unique_prefix_ratio is there to reveal).
"""

from typing import NamedTuple

import numpy as np
import numpy.typing as npt
import orjson
import polars as pl

from service.analytics.definitions import SUM_COLUMNS, SUM_DTYPES
from service.rollups import histogram

CHART_KEYS = ["level", "service", "model", "group_by", "group_value", "bucket_us"]
#: The group a row belongs to besides its (service, model) scope ('' for none).
GROUP_KEYS = ["group_by", "group_value"]
#: (grain, the grain it is merged from); 60 comes from `rollups` itself.
CHAIN: tuple[tuple[int, int], ...] = ((60, 0), (300, 60), (3600, 300), (86_400, 3600))
GRAINS_S = tuple(g for g, _ in CHAIN)
_KEY = np.dtype("<i8")

CHART_SCHEMA: dict[str, pl.DataType | type[pl.DataType]] = {
    "grain_s": pl.Int32,
    "level": pl.Int32,
    "service": pl.Utf8,
    "model": pl.Utf8,
    "group_by": pl.Utf8,
    "group_value": pl.Utf8,
    "bucket_us": pl.Int64,
    **SUM_DTYPES,
    "ttft_hit": pl.Binary,
    "ttft_miss": pl.Binary,
    "replicas": pl.Utf8,
    "first_keys": pl.Binary,
    # The row's own TTFT percentiles and distinct counts, read when a bucket is
    # one row (the usual case) instead of decoding its histograms and sets.
    "ttft_hit_p50": pl.Float64,
    "ttft_hit_p95": pl.Float64,
    "ttft_miss_p50": pl.Float64,
    "ttft_miss_p95": pl.Float64,
    "replica_count": pl.Int64,
    "prefix_count": pl.Int64,
}


def level_of(service: str | None, model: str | None) -> int:
    """The chart rows answering a (service, model) filter, None meaning all."""
    if service is not None:
        return 0 if model is not None else 1
    return 2 if model is not None else 3


class Group(NamedTuple):
    """A group of records within a scope (contract section 4b): `by` one of
    GROUP_BYS, `value` the records' value of that field."""

    by: str
    value: str


#: The record fields a group is by, in the order the read API names them.
GROUP_BYS = ("scenario", "tenant", "deploy")


class Scope(NamedTuple):
    """The chart rows answering one filter: a level, its service and model ('' for
    any) and a group ('' '' for none)."""

    level: int
    service: str
    model: str
    group_by: str = ""
    group_value: str = ""


def scope_key(service: str | None, model: str | None, group: Group | None = None) -> Scope:
    by, value = group if group is not None else ("", "")
    return Scope(level_of(service, model), service or "", model or "", by, value)


def _wider_scopes(pairs: pl.DataFrame) -> pl.DataFrame:
    """(service, model) rows three more times, keyed as the wider filter scopes they
    count in (one service, one model, everything), to be merged per key."""
    blank = pl.lit("")
    return pl.concat(
        [
            pairs.with_columns(pl.lit(level, pl.Int32).alias("level"), *keep)
            for level, keep in (
                (1, [blank.alias("model")]),
                (2, [blank.alias("service")]),
                (3, [blank.alias("service"), blank.alias("model")]),
            )
        ]
    )


def _sliced(flat: bytes, ends: npt.NDArray[np.int64], item: int) -> list[bytes | None]:
    """`flat` cut into consecutive pieces ending at `ends` (counted in items)."""
    out: list[bytes | None] = []
    start = 0
    for end in (ends * item).tolist():
        out.append(flat[start:end] if end > start else None)
        start = end
    return out


def _group_ids(keys: pl.DataFrame) -> tuple[pl.DataFrame, npt.NDArray[np.int64]]:
    """Distinct key rows (sorted) and, for each input row, its group's index."""
    groups = keys.unique().sort(keys.columns).with_row_index("gid")
    gid = keys.join(groups, on=keys.columns, how="left", maintain_order="left")["gid"]
    return groups.drop("gid"), gid.to_numpy().astype(np.int64)


def merge_histograms(
    gid: npt.NDArray[np.int64], blobs: pl.Series, groups: int
) -> list[bytes | None]:
    """Per group, the sum of the histograms of its rows (sparse, bins ascending)."""
    lengths = (blobs.bin.size().fill_null(0) // histogram.PAIR_BYTES).to_numpy()
    if not lengths.sum():
        return [None] * groups
    bins, counts = histogram.decode(b"".join(b for b in blobs.to_list() if b))
    long = pl.DataFrame(
        {
            "gid": np.repeat(gid, lengths),
            "bin": bins.astype(np.int64),
            "count": counts.astype(np.int64),
        }
    )
    merged = long.group_by("gid", "bin").agg(pl.col("count").sum()).sort("gid", "bin")
    pairs = np.empty(merged.height, dtype=histogram.PAIR_DTYPE)
    pairs["bin"] = merged["bin"].to_numpy()
    pairs["count"] = merged["count"].to_numpy()
    ends = np.cumsum(np.bincount(merged["gid"].to_numpy(), minlength=groups))
    return _sliced(pairs.tobytes(), ends, histogram.PAIR_BYTES)


def decode_keys(blobs: pl.Series) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """All first-key sets at once: the keys, and how many each row holds."""
    lengths = (blobs.bin.size().fill_null(0) // _KEY.itemsize).to_numpy().astype(np.int64)
    flat = np.frombuffer(b"".join(b for b in blobs.to_list() if b), dtype=_KEY)
    return flat.astype(np.int64), lengths


def _key_sets(
    gid: npt.NDArray[np.int64], keys: npt.NDArray[np.int64], groups: int
) -> list[bytes | None]:
    """Per group, the sorted distinct keys, as stored."""
    if not len(keys):
        return [None] * groups
    pairs = pl.DataFrame({"gid": gid, "key": keys}).unique().sort("gid", "key")
    ends = np.cumsum(np.bincount(pairs["gid"].to_numpy(), minlength=groups))
    flat = pairs["key"].to_numpy().astype(_KEY).tobytes()
    return _sliced(flat, ends, _KEY.itemsize)


def _name_sets(gid: npt.NDArray[np.int64], names: pl.Series, groups: int) -> list[str | None]:
    """Per group, the sorted distinct non-empty names as a JSON array."""
    frame = pl.DataFrame({"gid": gid, "name": names}).filter(pl.col("name") != "")
    sets = frame.group_by("gid").agg(pl.col("name").unique().sort())
    out: list[str | None] = [None] * groups
    for g, members in sets.iter_rows():
        out[g] = orjson.dumps(members).decode()
    return out


def _finish(
    groups: pl.DataFrame,
    sums: pl.DataFrame,
    grain_s: int,
    ttft: dict[str, list[bytes | None]],
    replicas: list[str | None],
    first_keys: list[bytes | None],
) -> pl.DataFrame:
    out = groups.join(sums, on=CHART_KEYS, how="left", maintain_order="left").with_columns(
        pl.lit(grain_s, pl.Int32).alias("grain_s"),
        pl.Series("ttft_hit", ttft["ttft_hit"], pl.Binary),
        pl.Series("ttft_miss", ttft["ttft_miss"], pl.Binary),
        pl.Series("replicas", replicas, pl.Utf8),
        pl.Series("first_keys", first_keys, pl.Binary),
    )
    percentiles = [
        pl.Series(f"{column}_{name}", values, pl.Float64)
        for column in ("ttft_hit", "ttft_miss")
        for name, values in zip(("p50", "p95"), row_percentiles(out[column]), strict=True)
    ]
    return out.with_columns(
        *percentiles,
        pl.col("replicas")
        .str.json_decode(pl.List(pl.Utf8))
        .list.len()
        .fill_null(0)
        .cast(pl.Int64)
        .alias("replica_count"),
        (pl.col("first_keys").bin.size().fill_null(0) // _KEY.itemsize)
        .cast(pl.Int64)
        .alias("prefix_count"),
    ).select(list(CHART_SCHEMA))


def group_percentiles(
    blobs: pl.Series, group: npt.NDArray[np.int64], groups: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """`histogram.group_percentiles` over a column of stored histograms: p50 and p95
    per group of the merged histograms of its rows, and which groups had any."""
    lengths = (blobs.bin.size().fill_null(0) // histogram.PAIR_BYTES).to_numpy()
    flat = b"".join(b for b in blobs.to_list() if b)
    return histogram.group_percentiles(group, lengths, flat, groups)


def row_percentiles(blobs: pl.Series) -> tuple[list[float | None], list[float | None]]:
    """p50 and p95 of each row's own histogram (None without one)."""
    rows = np.arange(len(blobs), dtype=np.int64)
    values, present = group_percentiles(blobs, rows, len(blobs))
    p50 = [v if ok else None for v, ok in zip(values[:, 0].tolist(), present.tolist(), strict=True)]
    p95 = [v if ok else None for v, ok in zip(values[:, 1].tolist(), present.tolist(), strict=True)]
    return p50, p95


def from_rollups(
    rollups: pl.DataFrame,
    prefixes: pl.DataFrame,
    grain_s: int,
    groups: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Chart rows from `rollups` rows (bucket_us, service, model, replica, the sums,
    ttft_hit, ttft_miss) and `prefix_rollups` keys (bucket_us, service, model,
    first_key) of the same grain and buckets, and `group_rollups` rows (already
    one per (service, model, group) and bucket, with their sets): the (service,
    model) rows first, then the other scopes merged from those (a few rows a bucket
    instead of one per deploy and replica)."""
    if rollups.is_empty():
        return pl.DataFrame(schema=CHART_SCHEMA)
    blank = [pl.lit("").alias(k) for k in GROUP_KEYS]
    pairs = level_zero(rollups.with_columns(blank), prefixes.with_columns(blank), grain_s)
    if groups is not None and not groups.is_empty():
        pairs = pl.concat([pairs, merge_rows(_as_level_zero(groups), grain_s)])
    return pl.concat([pairs, merge_rows(_wider_scopes(pairs), grain_s)])


def _as_level_zero(rows: pl.DataFrame) -> pl.DataFrame:
    """Stored group rows with the columns `_merge` reads."""
    return rows.with_columns(pl.lit(0, pl.Int32).alias("level"))


def level_zero(rollups: pl.DataFrame, prefixes: pl.DataFrame, grain_s: int) -> pl.DataFrame:
    """Level-0 chart rows (one per (service, model, group) and bucket) from rows that
    still split them by replica (and deploy), and their leading-prefix keys."""
    rows = rollups.with_columns(pl.lit(0, pl.Int32).alias("level"))
    groups, gid = _group_ids(rows.select(CHART_KEYS))
    sums = rows.group_by(CHART_KEYS).agg(pl.col(SUM_COLUMNS).sum())
    n = groups.height
    ttft = {c: merge_histograms(gid, rows[c], n) for c in ("ttft_hit", "ttft_miss")}
    replicas = _name_sets(gid, rows["replica"], n)
    keyed = prefixes.with_columns(pl.lit(0, pl.Int32).alias("level")).join(
        groups.with_row_index("gid"), on=CHART_KEYS, how="inner", maintain_order="left"
    )
    first_keys = _key_sets(
        keyed["gid"].to_numpy().astype(np.int64), keyed["first_key"].to_numpy(), n
    )
    return _finish(groups, sums, grain_s, ttft, replicas, first_keys)


def coarsen(rows: pl.DataFrame, grain_s: int) -> pl.DataFrame:
    """Chart rows of a finer grain merged into rows of `grain_s` (a multiple of it)."""
    grain_us = grain_s * 1_000_000
    return merge_rows(
        rows.with_columns((pl.col("bucket_us") // grain_us * grain_us).alias("bucket_us")),
        grain_s,
    )


def merge_rows(rows: pl.DataFrame, grain_s: int) -> pl.DataFrame:
    """Chart rows with equal keys merged into one: sums added, histograms added bin
    by bin, sets united."""
    if rows.is_empty():
        return pl.DataFrame(schema=CHART_SCHEMA)
    groups, gid = _group_ids(rows.select(CHART_KEYS))
    sums = rows.group_by(CHART_KEYS).agg(pl.col(SUM_COLUMNS).sum())
    n = groups.height
    ttft = {c: merge_histograms(gid, rows[c], n) for c in ("ttft_hit", "ttft_miss")}
    names = rows["replicas"].str.json_decode(pl.List(pl.Utf8))
    lengths = names.list.len().fill_null(0).to_numpy()
    replicas = _name_sets(np.repeat(gid, lengths), names.explode().drop_nulls(), n)
    keys, key_lengths = decode_keys(rows["first_keys"])
    first_keys = _key_sets(np.repeat(gid, key_lengths), keys, n)
    return _finish(groups, sums, grain_s, ttft, replicas, first_keys)
