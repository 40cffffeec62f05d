"""GET /v1/metrics: buckets and totals over the range, read through the one series
path (`service.services.series`, chart rollups), with the contract's ratios computed
from summed numerators and denominators (never averaged ratios)."""

from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from service.rollups.chart import Group
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
    group: Group | None = None


def metrics(session: Session, query: MetricsQuery) -> dict[str, Any]:
    """Raises `TooManyBuckets` when the range holds data in more than MAX_BUCKETS."""
    answer = series_path.series(
        session,
        SeriesQuery(
            query.service, query.model, query.from_us, query.to_us, query.bucket_s, query.group
        ),
    )
    return {"bucket_s": query.bucket_s, "buckets": answer.buckets, "totals": answer.totals}
