"""GET /v1/metrics: rollups re-bucketed to the asked bucket, with the contract's
ratios computed from summed numerators and denominators (never averaged ratios)."""

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
from sqlalchemy.orm import Session

from service import repository
from service.ingest.timestamps import us_to_rfc3339
from service.rollups import histogram
from service.rollups.aggregate import CAUSES, SUM_COLUMNS

MINUTE_S = 60
HOUR_S = 3600
DAY_S = 86_400
_HOUR_US = HOUR_S * 1_000_000


@dataclass(frozen=True)
class MetricsQuery:
    service: str | None
    model: str | None
    from_us: int | None
    to_us: int | None
    bucket_s: int


def rollup_grain(query: MetricsQuery) -> int:
    """Hourly rollups when they answer exactly (hour-multiple buckets, hour-aligned
    range), else minute rollups: month-long charts then read 60x fewer rows."""
    aligned = all(t is None or t % _HOUR_US == 0 for t in (query.from_us, query.to_us))
    return HOUR_S if query.bucket_s % HOUR_S == 0 and aligned else MINUTE_S


def metrics(session: Session, query: MetricsQuery) -> dict[str, Any]:
    grain = rollup_grain(query)
    filters = repository.RollupFilter(query.service, query.model, query.from_us, query.to_us)
    rows = repository.fetch_rollups(session, grain, filters)
    prefixes = repository.fetch_prefix_keys(session, grain, filters)
    bucket_us = query.bucket_s * 1_000_000
    rows = rows.with_columns(((pl.col("bucket_us") // bucket_us) * bucket_us).alias("out"))
    prefixes = prefixes.with_columns(((pl.col("bucket_us") // bucket_us) * bucket_us).alias("out"))
    per_bucket = _summarize(rows, prefixes, by="out")
    totals = _summarize(
        rows.with_columns(pl.lit(0).alias("out")),
        prefixes.with_columns(pl.lit(0).alias("out")),
        by="out",
    )
    return {
        "bucket_s": query.bucket_s,
        "buckets": [
            {"ts": us_to_rfc3339(out), **values} for out, values in sorted(per_bucket.items())
        ],
        "totals": totals.get(0, _metric_values(_zero_sums(), 0, 0, {})),
    }


def _summarize(rows: pl.DataFrame, prefixes: pl.DataFrame, by: str) -> dict[int, dict[str, Any]]:
    if rows.is_empty():
        return {}
    sums = rows.group_by(by).agg(
        pl.col(SUM_COLUMNS).sum(),
        pl.col("replica").filter(pl.col("replica") != "").n_unique().alias("replicas"),
    )
    distinct = (
        dict(prefixes.group_by(by).agg(pl.col("first_key").n_unique()).iter_rows())
        if not prefixes.is_empty()
        else {}
    )
    ttft = _ttft_percentiles(rows, by)
    return {
        row[by]: _metric_values(
            row, row["replicas"], distinct.get(row[by], 0), ttft.get(row[by], {})
        )
        for row in sums.iter_rows(named=True)
    }


def _ttft_percentiles(rows: pl.DataFrame, by: str) -> dict[int, dict[str, dict[str, float | None]]]:
    """p50/p95 per output bucket, from all the rows' histograms merged at once: the
    blobs are concatenated and read as one array, sorted by (bucket, bin), and each
    bucket's percentiles found by binary search on its cumulative counts."""
    answer: dict[int, dict[str, dict[str, float | None]]] = {}
    outs = rows[by].to_numpy()
    for outcome, column in (("hit", "ttft_hit"), ("miss", "ttft_miss")):
        bins, counts = histogram.decode(b"".join(b for b in rows[column].to_list() if b))
        if not len(bins):
            continue
        pairs_per_row = (rows[column].bin.size().fill_null(0) // histogram.PAIR_BYTES).to_numpy()
        keys = np.repeat(outs, pairs_per_row)
        order = np.lexsort((bins, keys))
        keys, bins, counts = keys[order], bins[order], counts[order].astype(np.int64)
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
        ends = np.r_[starts[1:], len(keys)]
        cumulative = np.cumsum(counts)
        for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
            before = int(cumulative[start - 1]) if start else 0
            total = int(cumulative[end - 1]) - before
            window = cumulative[start:end] - before
            values: dict[str, float | None] = {}
            for name, q in (("p50", 0.50), ("p95", 0.95)):
                rank = max(1, math.ceil(q * total))
                position = int(np.searchsorted(window, rank))
                values[name] = float(
                    histogram.bin_value(bins[start + position : start + position + 1])[0]
                )
            answer.setdefault(int(keys[start]), {})[outcome] = values
    return answer


def _zero_sums() -> dict[str, int]:
    return dict.fromkeys(SUM_COLUMNS, 0)


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def _metric_values(
    sums: dict[str, Any], replicas: int, distinct_prefixes: int, ttft: dict[str, Any]
) -> dict[str, Any]:
    rewarms = {cause: int(sums[f"rewarms_{cause}"]) for cause in CAUSES}
    empty = {"p50": None, "p95": None}
    return {
        "requests": sums["requests"],
        "prompt_tokens": sums["prompt_tokens"],
        "cached_tokens": sums["cached_tokens"],
        "hit_rate": _ratio(sums["cached_tokens"], sums["prompt_tokens"]),
        "fingerprinted_requests": sums["fp_requests"],
        "fingerprinted_prompt_tokens": sums["fp_prompt_tokens"],
        "cacheable_tokens": sums["cacheable_tokens"],
        "cacheable_fraction": _ratio(sums["cacheable_tokens"], sums["fp_prompt_tokens"]),
        "capture_ratio": _ratio(sums["fp_cached_tokens"], sums["cacheable_tokens"]),
        "rewarms": {"total": sum(rewarms.values()), **rewarms},
        "rewarm_tokens": sums["rewarm_tokens"],
        "rewarm_tokens_by_cause": {c: int(sums[f"rewarm_tokens_{c}"]) for c in CAUSES},
        "rewarm_share": _ratio(sums["rewarm_tokens"], sums["prompt_tokens"]),
        "history_rewrites": sums["history_rewrites"],
        "session_requests": sums["session_requests"],
        "unique_prefix_ratio": _ratio(distinct_prefixes, sums["fp_requests"]),
        "hits": sums["hits"],
        "misses": sums["misses"],
        "ttft_ms": {"hit": ttft.get("hit", empty), "miss": ttft.get("miss", empty)},
        "replicas": replicas,
    }
