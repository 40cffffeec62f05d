"""The time series the dashboard charts, in the shape of `/v1/metrics` buckets,
computed for speed at dashboard scale (a month of a million requests a day).

Same definitions as `service.services.metrics` (tests/dashboards/test_series.py
checks that both agree bucket for bucket), three differences in how:
- rows are selected with `service IN (...)` when no service is chosen, so the
  (grain, service, bucket) index bounds the read instead of a scan of every row of
  the grain;
- TTFT histograms are merged with NumPy/Polars in one pass over all rows instead of
  one Python loop step per row;
- distinct leading prefixes per bucket are counted by the database.
"""

from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import case, func, select
from sqlalchemy.orm import Session

from dashboards.queries import PREFIXES, ROLLUPS
from service.ingest.timestamps import us_to_rfc3339
from service.rollups import histogram
from service.rollups.aggregate import CAUSES

SUMMED = [
    "requests",
    "prompt_tokens",
    "cached_tokens",
    "fp_requests",
    "fp_prompt_tokens",
    "fp_cached_tokens",
    "cacheable_tokens",
    "rewarm_tokens",
    *[f"rewarms_{c}" for c in CAUSES],
    *[f"rewarm_tokens_{c}" for c in CAUSES],
    "history_rewrites",
    "session_requests",
    "hits",
    "misses",
]
_PAIR_BYTES = 6  # histogram pairs: uint16 bin + uint32 count


def _filters(
    table: Any, grain_s: int, services: Sequence[str], models: Sequence[str], model: str | None
) -> list[Any]:
    return [
        table.c.grain_s == grain_s,
        table.c.service.in_(list(services)),
        table.c.model.in_([model] if model is not None else list(models)),
    ]


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def ttft_percentiles(out: np.ndarray, blobs: list[bytes | None]) -> dict[int, dict[str, float]]:
    """p50 and p95 per output bucket of the merged histograms (nearest rank, as
    `histogram.percentile`): one dense (bucket x bin) count matrix, no sort. Bins
    in use span a few hundred (1% wide each), buckets at most a few thousand."""
    lengths = np.fromiter((len(b) // _PAIR_BYTES if b else 0 for b in blobs), np.int64, len(blobs))
    if not lengths.sum():
        return {}
    pairs = np.frombuffer(b"".join(b for b in blobs if b), dtype=histogram._PAIR)
    buckets, dense = np.unique(out, return_inverse=True)
    bins = pairs["bin"].astype(np.int64)
    low = int(bins.min())
    width = int(bins.max()) - low + 1
    cells = np.repeat(dense, lengths) * width + (bins - low)
    matrix = np.bincount(
        cells, weights=pairs["count"].astype(np.float64), minlength=len(buckets) * width
    ).reshape(len(buckets), width)
    cumulative = np.cumsum(matrix, axis=1)
    totals = cumulative[:, -1]
    answer: dict[int, dict[str, float]] = {}
    present = totals > 0
    for name, q in (("p50", 0.50), ("p95", 0.95)):
        rank = np.maximum(1, np.ceil(totals * q))
        position = np.argmax(cumulative >= rank[:, None], axis=1)
        values = histogram.bin_value(position + low)
        for i in np.flatnonzero(present).tolist():
            answer.setdefault(int(buckets[i]), {})[name] = float(values[i])
    return answer


def _bucket(
    out_us: int, sums: dict[str, Any], replicas: int, distinct: int, ttft: dict[str, Any]
) -> dict[str, Any]:
    rewarms = {cause: int(sums[f"rewarms_{cause}"]) for cause in CAUSES}
    empty = {"p50": None, "p95": None}
    return {
        "ts": us_to_rfc3339(out_us),
        "requests": int(sums["requests"]),
        "prompt_tokens": int(sums["prompt_tokens"]),
        "cached_tokens": int(sums["cached_tokens"]),
        "hit_rate": _ratio(sums["cached_tokens"], sums["prompt_tokens"]),
        "fingerprinted_requests": int(sums["fp_requests"]),
        "fingerprinted_prompt_tokens": int(sums["fp_prompt_tokens"]),
        "cacheable_tokens": int(sums["cacheable_tokens"]),
        "cacheable_fraction": _ratio(sums["cacheable_tokens"], sums["fp_prompt_tokens"]),
        "capture_ratio": _ratio(sums["fp_cached_tokens"], sums["cacheable_tokens"]),
        "rewarms": {"total": sum(rewarms.values()), **rewarms},
        "rewarm_tokens": int(sums["rewarm_tokens"]),
        "rewarm_tokens_by_cause": {c: int(sums[f"rewarm_tokens_{c}"]) for c in CAUSES},
        "rewarm_share": _ratio(sums["rewarm_tokens"], sums["prompt_tokens"]),
        "history_rewrites": int(sums["history_rewrites"]),
        "session_requests": int(sums["session_requests"]),
        "unique_prefix_ratio": _ratio(distinct, sums["fp_requests"]),
        "hits": int(sums["hits"]),
        "misses": int(sums["misses"]),
        "ttft_ms": {"hit": ttft.get("hit", empty), "miss": ttft.get("miss", empty)},
        "replicas": replicas,
    }


def series(
    session: Session,
    *,
    grain_s: int,
    bucket_s: int,
    services: Sequence[str],
    models: Sequence[str],
    model: str | None,
    from_us: int,
    to_us: int,
) -> list[dict[str, Any]]:
    """Buckets of `bucket_s` over [from_us, to_us) from rollups of `grain_s` (which
    must divide the bucket and align the range), for the given services and the
    given model (None: all of `models`, every model the services use)."""
    if not services:
        return []
    bucket_us = bucket_s * 1_000_000
    c = ROLLUPS.c
    where = [*_filters(ROLLUPS, grain_s, services, models, model), c.bucket_us >= from_us]
    where.append(c.bucket_us < to_us)
    out_expr = (c.bucket_us // bucket_us) * bucket_us
    replicas = func.count(func.distinct(case((c.replica != "", c.replica), else_=None)))
    # The database sums (no row comes back but one per bucket) ...
    summed = session.execute(
        select(out_expr, replicas, *[func.sum(c[name]) for name in SUMMED])
        .where(*where)
        .group_by(out_expr)
    ).all()
    if not summed:
        return []
    # ... and the histograms come back to be merged here.
    blobs = session.execute(
        select(c.bucket_us, c.ttft_hit, c.ttft_miss).where(
            *where, c.ttft_hit.is_not(None) | c.ttft_miss.is_not(None)
        )
    ).all()
    out = (np.fromiter((r[0] for r in blobs), np.int64, len(blobs)) // bucket_us) * bucket_us
    ttft = {
        "hit": ttft_percentiles(out, [r[1] for r in blobs]),
        "miss": ttft_percentiles(out, [r[2] for r in blobs]),
    }
    p = PREFIXES.c
    prefix_out = (p.bucket_us // bucket_us) * bucket_us
    distinct: dict[int, int] = dict(
        session.execute(
            select(prefix_out, func.count(func.distinct(p.first_key)))
            .where(
                *_filters(PREFIXES, grain_s, services, models, model),
                p.bucket_us >= from_us,
                p.bucket_us < to_us,
            )
            .group_by(prefix_out)
        ).all()
    )
    buckets = []
    for row in sorted(summed, key=lambda r: int(r[0])):
        key = int(row[0])
        sums = {name: int(value or 0) for name, value in zip(SUMMED, row[2:], strict=True)}
        per_outcome = {o: ttft[o][key] for o in ("hit", "miss") if key in ttft[o]}
        buckets.append(_bucket(key, sums, int(row[1]), int(distinct.get(key, 0)), per_outcome))
    return buckets
