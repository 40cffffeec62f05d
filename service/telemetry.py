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
from sqlalchemy import event
from sqlalchemy.orm import Session

from service.analytics.definitions import dollars, ratios
from service.repository import telemetry as telemetry_repo

REGISTRY = CollectorRegistry(auto_describe=True)
RECORDS = Counter(
    "cachewatch_records",
    "Usage records received by this process, by outcome: accepted (stored), "
    "duplicate (request_id already stored), rejected (invalid; kept in /v1/rejected).",
    ["outcome"],
    registry=REGISTRY,
)
OTLP_ITEMS = Counter(
    "cachewatch_otlp_items",
    "Spans and log records received over OTLP by this process that are not usage: "
    "ignored (not a model call: an application's other spans and log lines, a coding "
    "agent's other events) or body (a coding agent's request body, whose fingerprint "
    "goes to its request's record).",
    ["signal", "kind"],
    registry=REGISTRY,
)
DETECTION_RUNS = Counter(
    "cachewatch_detection_runs", "Detection passes run by this process.", registry=REGISTRY
)
for _outcome in ("accepted", "duplicate", "rejected"):
    RECORDS.labels(_outcome)  # exported as 0 from the start: rate() needs a first sample
for _signal in ("traces", "logs"):
    for _kind in ("ignored", "body"):
        OTLP_ITEMS.labels(_signal, _kind)

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


def count_otlp_items(signal: str, ignored: int, bodies: int) -> None:
    """Count what a decoded OTLP request held besides usage (as received: a request
    answered 503 and retried counts twice)."""
    if ignored:
        OTLP_ITEMS.labels(signal, "ignored").inc(ignored)
    if bodies:
        OTLP_ITEMS.labels(signal, "body").inc(bodies)


def count_detection_run() -> None:
    DETECTION_RUNS.inc()


WINDOW_S = 3600


class RollupGauges(Collector):
    """Hit rate, cacheable fraction, requests, spend and waste in dollars per
    (service, model) over the last hour of wall-clock time, from the minute rollups
    (so they lag the newest records by at most one analytics pass,
    `CACHEWATCH_ANALYTICS_INTERVAL_S`)."""

    def __init__(self, session: Session, now_us: int | None = None) -> None:
        self._session = session
        self._now_us = now_us if now_us is not None else time.time_ns() // 1000

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
        spend, wasted = (
            GaugeMetricFamily(
                f"cachewatch_{name}",
                f"{meaning}, over the last hour (absent for models without prices).",
                labels=labels,
                unit="usd",
            )
            for name, meaning in (
                ("spend", "Dollars the input tokens cost"),
                ("wasted", "Dollars lost to recomputing cacheable tokens (rewarms)"),
            )
        )
        since_us = self._now_us - WINDOW_S * 1_000_000
        for row in telemetry_repo.last_hour_sums(self._session, since_us, WINDOW_S):
            key = [row["service"], row["model"]]
            requests.add_metric(key, float(row["requests"]))
            figures = ratios(row, ("hit_rate", "cacheable_fraction"))
            for gauge, value in ((hit_rate, figures["hit_rate"]),
                                 (cacheable, figures["cacheable_fraction"])):  # fmt: skip
                if value is not None:
                    gauge.add_metric(key, value)
            for gauge, name in ((spend, "spend_usd"), (wasted, "wasted_usd")):
                usd = dollars(row[name], row["priced_requests"])
                if usd is not None:
                    gauge.add_metric(key, usd)
        yield from (hit_rate, cacheable, requests, spend, wasted)


class AlertMetrics(Collector):
    """The Slack outbox (`service.alerts`): alerts per kind and state, and the HTTP
    attempts made to deliver them (a counter: rows are only removed with their
    regression by retention, which Prometheus sees as a counter reset)."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def collect(self) -> Iterator[Metric]:
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
        for kind, state, n, tries in telemetry_repo.alert_counts(self._session):
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
