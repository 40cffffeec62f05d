"""The time series the dashboard charts, in the shape of `/v1/metrics` buckets.

There is one series path, `service.services.series` (chart rollups, one row per
bucket); `/v1/metrics` and the dashboard both read it, so they agree bucket for
bucket by construction (tests/dashboards/test_series.py checks it). This module
keeps the dashboard's historical entry points over it."""

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
from sqlalchemy.orm import Session

from service.rollups import histogram
from service.services.series import SeriesQuery
from service.services.series import series as read_series


def ttft_percentiles(
    out: npt.NDArray[np.integer], blobs: Sequence[bytes | None]
) -> dict[int, dict[str, float]]:
    """p50 and p95 per output bucket of the merged histograms (nearest rank, as
    `histogram.percentile`), vectorized (`histogram.group_percentiles`)."""
    buckets, group = np.unique(np.asarray(out, dtype=np.int64), return_inverse=True)
    lengths = np.fromiter(
        (len(b) // histogram.PAIR_BYTES if b else 0 for b in blobs), np.int64, len(blobs)
    )
    flat = b"".join(b for b in blobs if b)
    values, present = histogram.group_percentiles(
        group.astype(np.int64), lengths, flat, len(buckets)
    )
    return {
        int(buckets[i]): {"p50": float(values[i, 0]), "p95": float(values[i, 1])}
        for i in np.flatnonzero(present).tolist()
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
    """Buckets of `bucket_s` over [from_us, to_us) for `services` (the one selected,
    or every service with data) and `model` (None: all). `grain_s` and `models` are
    no longer needed (the series path picks the grains; all models is a scope of its
    own) and kept for callers."""
    del grain_s, models
    if not services:
        return []
    service = services[0] if len(services) == 1 else None
    query = SeriesQuery(service, model, from_us, to_us, bucket_s)
    return read_series(session, query).buckets
