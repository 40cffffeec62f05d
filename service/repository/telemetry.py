"""The reads behind the Prometheus gauges (`service.telemetry`), made at scrape time.
Nothing here commits."""

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Table, func, select
from sqlalchemy.orm import Session

from service.analytics.definitions import as_sum
from service.models import Alert, Rollup

ROLLUPS = cast(Table, Rollup.__table__)
#: The sums the gauges are made of.
GAUGE_SUMS = (
    "requests",
    "prompt_tokens",
    "cached_tokens",
    "fp_prompt_tokens",
    "cacheable_tokens",
    "priced_requests",
    "spend_usd",
    "wasted_usd",
)


def last_hour_sums(session: Session, since_us: int, window_s: int) -> list[dict[str, Any]]:
    """GAUGE_SUMS per (service, model) over the minute rollups from `since_us`.
    Services first from the hourly rows (`window_s` back further, so the hour that
    holds `since_us` is included), then one indexed range read each (grain, service,
    bucket): no scan of every minute row of the retention."""
    c = ROLLUPS.c
    services = session.scalars(
        select(c.service)
        .where(c.grain_s == 3600, c.bucket_us >= since_us - window_s * 1_000_000)
        .distinct()
    ).all()
    sums = [func.coalesce(func.sum(c[name]), 0).label(name) for name in GAUGE_SUMS]
    rows: list[dict[str, Any]] = []
    for service in sorted(services):
        query = (
            select(c.service, c.model, *sums)
            .where(c.grain_s == 60, c.service == service, c.bucket_us >= since_us)
            .group_by(c.service, c.model)
            .order_by(c.model)
        )
        for row in session.execute(query).mappings():
            rows.append({**row, **{name: as_sum(name, row[name]) for name in GAUGE_SUMS}})
    return rows


def alert_counts(session: Session) -> Sequence[tuple[str, str, int, int]]:
    """(kind, state, alerts, delivery attempts) per kind and state."""
    query = (
        select(Alert.kind, Alert.state, func.count(), func.coalesce(func.sum(Alert.attempts), 0))
        .group_by(Alert.kind, Alert.state)
        .order_by(Alert.kind, Alert.state)
    )
    return [(str(k), str(s), int(n), int(t)) for k, s, n, t in session.execute(query).all()]
