"""The service's own Prometheus metrics (served by `GET /metrics`).

Counters live in one process-wide registry and count what this process did:
records accepted, duplicates and rejected (counted when the ingesting transaction
commits, so a batch answered 503 is not counted) and detection passes. What is
shared by every process is read from the database at scrape time: the Slack alerts
by state and their delivery attempts (the alerts job may run in `cachewatch worker`,
which serves no HTTP), and the per (service, model) gauges from the rollups."""

import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import Table, event, func, select
from sqlalchemy.orm import Session

from service.models import Alert, Rollup

REGISTRY = CollectorRegistry(auto_describe=True)
RECORDS = Counter(
    "cachewatch_records",
    "Usage records received by this process, by outcome: accepted (stored), "
    "duplicate (request_id already stored), rejected (invalid; kept in /v1/rejected).",
    ["outcome"],
    registry=REGISTRY,
)
DETECTION_RUNS = Counter(
    "cachewatch_detection_runs", "Detection passes run by this process.", registry=REGISTRY
)
for _outcome in ("accepted", "duplicate", "rejected"):
    RECORDS.labels(_outcome)  # exported as 0 from the start: rate() needs a first sample

_PENDING = "cachewatch.telemetry.pending"
_LISTENING = "cachewatch.telemetry.listening"


def count_ingest(session: Session, accepted: int, duplicates: int, rejected: int) -> None:
    """Count an ingested batch once `session` commits (dropped if it rolls back)."""
    pending: dict[str, int] = session.info.setdefault(_PENDING, {})
    for outcome, n in (("accepted", accepted), ("duplicate", duplicates), ("rejected", rejected)):
        pending[outcome] = pending.get(outcome, 0) + n
    if not session.info.get(_LISTENING):
        session.info[_LISTENING] = True
        event.listen(session, "after_commit", _flush)
        event.listen(session, "after_soft_rollback", _drop)


def _flush(session: Session) -> None:
    for outcome, n in session.info.pop(_PENDING, {}).items():
        if n:
            RECORDS.labels(outcome).inc(n)


def _drop(session: Session, _previous: Any) -> None:
    session.info.pop(_PENDING, None)


def count_detection_run() -> None:
    DETECTION_RUNS.inc()


ROLLUPS: Table = Rollup.__table__  # type: ignore[assignment]
WINDOW_S = 3600


class RollupGauges(Collector):
    """Hit rate, cacheable fraction and requests per (service, model) over the last
    hour of wall-clock time, from the minute rollups (so they lag the newest records
    by at most one analytics pass, `CACHEWATCH_ANALYTICS_INTERVAL_S`)."""

    def __init__(self, session: Session, now_us: int | None = None) -> None:
        self._session = session
        self._now_us = now_us if now_us is not None else time.time_ns() // 1000

    def _rows(self) -> list[tuple[Any, ...]]:
        since = self._now_us - WINDOW_S * 1_000_000
        c = ROLLUPS.c
        # Services first from the hourly rows, then one indexed range read each
        # (grain, service, bucket): no scan of every minute row of the retention.
        services = self._session.scalars(
            select(c.service)
            .where(c.grain_s == 3600, c.bucket_us >= since - WINDOW_S * 1_000_000)
            .distinct()
        ).all()
        sums = [
            func.sum(c.requests),
            func.sum(c.prompt_tokens),
            func.sum(c.cached_tokens),
            func.sum(c.fp_prompt_tokens),
            func.sum(c.cacheable_tokens),
        ]
        rows: list[tuple[Any, ...]] = []
        for service in sorted(services):
            query = (
                select(c.service, c.model, *sums)
                .where(c.grain_s == 60, c.service == service, c.bucket_us >= since)
                .group_by(c.service, c.model)
                .order_by(c.model)
            )
            rows.extend(tuple(r) for r in self._session.execute(query).all())
        return rows

    def collect(self) -> Iterator[Metric]:
        labels = ["service", "model"]
        hit_rate = GaugeMetricFamily(
            "cachewatch_hit_rate",
            "Cached / prompt tokens over the last hour.",
            labels=labels,
        )
        cacheable = GaugeMetricFamily(
            "cachewatch_cacheable_fraction",
            "Cacheable / prompt tokens of fingerprinted requests over the last hour "
            "(the ceiling of the hit rate).",
            labels=labels,
        )
        requests = GaugeMetricFamily(
            "cachewatch_requests_last_hour", "Usage records over the last hour.", labels=labels
        )
        for service, model, n, prompt, cached, fp_prompt, cacheable_tokens in self._rows():
            key = [str(service), str(model)]
            requests.add_metric(key, float(n or 0))
            if prompt:
                hit_rate.add_metric(key, float(cached or 0) / float(prompt))
            if fp_prompt:
                cacheable.add_metric(key, float(cacheable_tokens or 0) / float(fp_prompt))
        yield from (hit_rate, cacheable, requests)


class AlertMetrics(Collector):
    """The Slack outbox (`service.alerts`): alerts per kind and state, and the HTTP
    attempts made to deliver them (a counter: rows are only removed with their
    regression by retention, which Prometheus sees as a counter reset)."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def collect(self) -> Iterator[Metric]:
        query = (
            select(
                Alert.kind, Alert.state, func.count(), func.coalesce(func.sum(Alert.attempts), 0)
            )
            .group_by(Alert.kind, Alert.state)
            .order_by(Alert.kind, Alert.state)
        )
        alerts = GaugeMetricFamily(
            "cachewatch_alerts",
            "Slack alerts by kind (opened, resolved) and state (pending, sending, sent, "
            "failed, no_webhook).",
            labels=["kind", "state"],
        )
        attempts = CounterMetricFamily(
            "cachewatch_alert_delivery_attempts",
            "HTTP attempts made to deliver Slack alerts, by kind.",
            labels=["kind"],
        )
        per_kind: dict[str, float] = {}
        for kind, state, n, tries in self._session.execute(query).all():
            alerts.add_metric([str(kind), str(state)], float(n))
            per_kind[str(kind)] = per_kind.get(str(kind), 0.0) + float(tries)
        for name, total in sorted(per_kind.items()):
            attempts.add_metric([name], total)
        yield from (alerts, attempts)


class _Chain(Collector):
    def __init__(self, *collectors: Collector) -> None:
        self._collectors = collectors

    def collect(self) -> Iterator[Metric]:
        for collector in self._collectors:
            yield from collector.collect()


def scrape_registry(session: Session, now_us: int | None = None) -> CollectorRegistry:
    """A registry for one scrape: the process counters and the rollup gauges."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Chain(REGISTRY, RollupGauges(session, now_us), AlertMetrics(session)))
    return registry
