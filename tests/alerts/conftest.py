"""Alerts fixtures: a fake Slack on loopback, alert settings with short intervals, and
regressions stored directly (delivery needs no traffic) or found by detection."""

import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from service.alerts import outbox
from service.alerts.delivery import DeliveryReport, deliver_due
from service.models import Alert, Regression
from service.settings import Settings
from tests.alerts.fake_slack import FakeSlack

FIXED_REGRESSION: dict[str, Any] = {
    "service": "assistant",
    "model": "acme-70b-instruct",
    "change_ts_us": 1_795_443_900_000_000,  # 2026-11-23T14:25:00Z
    "detected_at_us": 1_795_445_100_000_000,  # 2026-11-23T14:45:00Z
    "updated_at_us": 1_795_445_100_000_000,
    "status": "open",
    "resolved_at_us": None,
    "before": {
        "hit_rate": 0.71,
        "cacheable_fraction": 0.8,
        "rewarm_share": 0.05,
        "unique_prefix_ratio": 0.01,
    },
    "after": {
        "hit_rate": 0.12,
        "cacheable_fraction": 0.14,
        "rewarm_share": 0.02,
        "unique_prefix_ratio": 0.97,
    },
    "attributed_event_id": 3,
    "attributed_to": {
        "event_id": 3,
        "kind": "deploy",
        "deploy": "v42",
        "replicas": None,
        "ts": "2026-11-23T14:21:00Z",
        "source": "posted",
        "lag_s": 240.0,
    },
    "cause": "prefix_instability",
    "evidence": [
        "segment `system` had 1 variant per hour before and 980 after",
        "unique_prefix_ratio 0.01 -> 0.97 (distinct request starts per request)",
    ],
}


@pytest.fixture
def fake_slack() -> Iterator[FakeSlack]:
    fake = FakeSlack().start()
    yield fake
    fake.stop()


def alert_settings(base: Settings, webhook: str | None, **overrides: Any) -> Settings:
    """Short everything, so that retries and backoff take milliseconds."""
    values: dict[str, Any] = {
        "slack_webhook_url": webhook,
        "public_url": "https://cachewatch.example.com",
        "alerts_min_interval_s": 0.0,
        "alerts_backoff_base_s": 0.05,
        "alerts_backoff_max_s": 0.4,
        "alerts_max_attempts": 5,
        "alerts_http_timeout_s": 2.0,
        "alerts_lease_s": 10.0,
    }
    values.update(overrides)
    return base.model_copy(update=values)


@pytest.fixture
def slack_settings(settings: Settings, fake_slack: FakeSlack) -> Settings:
    return alert_settings(settings, fake_slack.url)


def add_regression(session: Session, **changes: Any) -> Regression:
    """A regression as detection stores it, with its `opened` alert queued."""
    values = {**FIXED_REGRESSION, **changes}
    regression = Regression(**values)
    session.add(regression)
    session.flush()
    outbox.enqueue_for_detection(session, [regression], [], time.time_ns() // 1000)
    return regression


def alerts_of(session: Session, regression_ids: Sequence[int] | None = None) -> list[Alert]:
    session.expire_all()
    query = select(Alert).order_by(Alert.id)
    if regression_ids is not None:
        query = query.where(Alert.regression_id.in_(list(regression_ids)))
    return list(session.scalars(query).all())


def deliver_until(
    factory: sessionmaker[Session],
    settings: Settings,
    done: Any,
    timeout_s: float = 10.0,
) -> list[DeliveryReport]:
    """Run delivery passes (as the job does on its interval, here every 20 ms) until
    `done()`; fails after `timeout_s`."""
    reports = []
    deadline = time.monotonic() + timeout_s
    while not done():
        assert time.monotonic() < deadline, "delivery did not finish in time"
        reports.append(deliver_due(factory, settings))
        time.sleep(0.02)
    return reports


def regression_ids_in(payload: dict[str, Any]) -> list[int]:
    """The regressions a delivered message is about (from its footer: `#7`)."""
    import re

    footer = payload["blocks"][-1]["elements"][0]["text"]
    return [int(n) for n in re.findall(r"#(\d+)", footer)]
