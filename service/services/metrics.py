"""GET /v1/metrics: buckets and totals over the range, read through the one series
path (`service.services.series`, chart rollups), with the contract's ratios computed
from summed numerators and denominators (never averaged ratios)."""

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl
from sqlalchemy.orm import Session

from service.rollups import histogram
from service.services import series as series_path
from service.services.series import MAX_BUCKETS, SeriesQuery, TooManyBuckets

__all__ = ["DAY_S", "MAX_BUCKETS", "MINUTE_S", "MetricsQuery", "TooManyBuckets", "metrics"]

MINUTE_S = 60
HOUR_S = 3600
DAY_S = 86_400


@dataclass(frozen=True)
class MetricsQuery:
    service: str | None
    model: str | None
    from_us: int | None
    to_us: int | None
    bucket_s: int


def metrics(session: Session, query: MetricsQuery) -> dict[str, Any]:
    """Raises `TooManyBuckets` when the range holds data in more than MAX_BUCKETS."""
    answer = series_path.series(
        session,
        SeriesQuery(query.service, query.model, query.from_us, query.to_us, query.bucket_s),
    )
    return {"bucket_s": query.bucket_s, "buckets": answer.buckets, "totals": answer.totals}


def _ttft_percentiles(rows: pl.DataFrame, by: str) -> dict[int, dict[str, dict[str, float | None]]]:
    """p50/p95 per value of `by` of the rows' merged `ttft_hit`/`ttft_miss`
    histograms (`histogram.group_percentiles`); outcomes without data are absent."""
    answer: dict[int, dict[str, dict[str, float | None]]] = {}
    outs, group = np.unique(rows[by].to_numpy().astype(np.int64), return_inverse=True)
    for outcome, column in (("hit", "ttft_hit"), ("miss", "ttft_miss")):
        blobs = rows[column].cast(pl.Binary)
        lengths = (blobs.bin.size().fill_null(0) // histogram.PAIR_BYTES).to_numpy()
        flat = b"".join(b for b in blobs.to_list() if b)
        values, present = histogram.group_percentiles(group, lengths, flat, len(outs))
        for i in np.flatnonzero(present).tolist():
            p50, p95 = values[i].tolist()
            answer.setdefault(int(outs[i]), {})[outcome] = {"p50": p50, "p95": p95}
    return answer
