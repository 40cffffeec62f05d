"""The alerts job: claims due alerts, sends them as one message, records the outcome.

Exactly one message per (regression, kind), with several workers and restarts:

1. claim (committed transaction): the due alerts become `sending` under a fresh
   claim token with a lease; PostgreSQL skips rows another worker is claiming.
2. send: one HTTP POST, outside any transaction, bounded by a timeout.
3. record (committed transaction): only if our claim still holds them.

A worker that dies between 1 and 3 leaves its alerts `sending`; no one touches them
until the lease runs out, then they are sent again. That window, where Slack may
have the message and the database does not know it, is in docs/alerts.md."""

import logging
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from slack_sdk.errors import SlackObjectFormationError
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from service.alerts.message import AlertItem, Kind, compose
from service.alerts.slack import Outcome, SlackWebhook, Verdict, webhook_key
from service.repository import alerts as alert_queries
from service.services.regressions import regression_to_json
from service.settings import Settings

log = logging.getLogger(__name__)

_US = 1_000_000
# A wait for the webhook's next slot shorter than this is slept through within the
# run; a longer one (Slack's Retry-After) ends the run.
_SHORT_WAIT_US = 100_000


@dataclass
class DeliveryReport:
    messages: int = 0
    sent: int = 0
    retried: int = 0
    failed: int = 0
    waiting_for_webhook: int = 0


@dataclass(frozen=True)
class _Batch:
    claim: str
    alert_ids: tuple[int, ...]
    items: tuple[AlertItem, ...]


@dataclass(frozen=True)
class _Wait:
    us: int


def _now_us() -> int:
    return time.time_ns() // 1000


def run_job(session: Session, settings: Settings) -> DeliveryReport:
    """The worker's entry (`service.worker.jobs`). The worker hands every job a
    session inside one transaction, but delivery must commit its claim before the
    HTTP call and record the answer after it, so it leaves that session unused (it
    never connects, so it holds no lock) and opens short sessions on the same bind."""
    factory = sessionmaker(bind=session.get_bind(), expire_on_commit=False)
    return deliver_due(factory, settings)


def deliver_due(
    factory: sessionmaker[Session],
    settings: Settings,
    *,
    sleep: Callable[[float], None] = time.sleep,
    rng: random.Random | None = None,
) -> DeliveryReport:
    """Send what is due now; returns when nothing is due, the webhook must rest (a
    429), or a lease was lost."""
    report = DeliveryReport()
    url = settings.slack_webhook_url
    if not url:
        with factory.begin() as session:
            report.waiting_for_webhook = alert_queries.mark_waiting_for_webhook(session, _now_us())
        return report
    if settings.alerts_lease_s <= 2 * settings.alerts_http_timeout_s:
        log.warning("alerts_lease_s should exceed twice alerts_http_timeout_s")
    key = webhook_key(url)
    spacing_us = int(settings.alerts_min_interval_s * _US)
    jitter = rng or random.Random()
    with SlackWebhook(url, settings.alerts_http_timeout_s) as webhook:
        while True:
            step = _claim(factory, settings, key)
            if step is None:
                break
            if isinstance(step, _Wait):
                if step.us > max(spacing_us, _SHORT_WAIT_US):
                    break
                sleep(step.us / _US)
                continue
            outcome = _send(webhook, step, settings.public_url)
            report.messages += 1
            held = _record(factory, settings, key, step, outcome, jitter, sleep)
            if outcome.verdict is Verdict.SENT:
                report.sent += held
            elif outcome.verdict is Verdict.FAILED:
                report.failed += held
            else:
                report.retried += held
            if outcome.verdict is Verdict.RATE_LIMITED or held < len(step.alert_ids):
                break
    return report


def _claim(factory: sessionmaker[Session], settings: Settings, key: str) -> _Batch | _Wait | None:
    with factory.begin() as session:
        # The webhook's row lock makes claims one at a time across workers, and the
        # webhook stays taken while a message is in flight (until the outcome is
        # recorded, at worst until the lease ends): one message at a time per webhook,
        # each at least `alerts_min_interval_s` after the previous one's answer,
        # whichever worker sends it.
        free_at = alert_queries.lock_webhook(session, key)
        now = _now_us()
        if free_at > now:
            return _Wait(free_at - now) if alert_queries.any_due(session, now) else None
        claim = str(uuid.uuid4())
        lease_until = now + int(settings.alerts_lease_s * _US)
        alerts = alert_queries.claim_due(
            session, now, settings.alerts_digest_max, claim, lease_until
        )
        if not alerts:
            return None
        alert_queries.hold_webhook_until(session, key, lease_until)
        regressions = alert_queries.regressions(session, {a.regression_id for a in alerts})
        items = tuple(
            AlertItem(cast(Kind, a.kind), regression_to_json(regressions[a.regression_id]))
            for a in alerts
        )
        return _Batch(claim, tuple(a.id for a in alerts), items)


def _send(webhook: SlackWebhook, batch: _Batch, public_url: str) -> Outcome:
    try:
        payload = compose(batch.items, public_url).payload()
    except SlackObjectFormationError as exc:
        # Slack would refuse it the same way every time: no point in retrying.
        return Outcome(Verdict.FAILED, None, f"invalid message: {exc}")
    except Exception as exc:
        # Building is pure, so this would fail again too; failing the alerts keeps a
        # bug from holding them `sending` and retrying forever.
        log.exception("alerts %s: cannot build the message", batch.alert_ids)
        return Outcome(Verdict.FAILED, None, f"cannot build the message: {exc!r}")
    return webhook.post(payload)


def _record(
    factory: sessionmaker[Session],
    settings: Settings,
    key: str,
    batch: _Batch,
    outcome: Outcome,
    rng: random.Random,
    sleep: Callable[[float], None],
) -> int:
    """Store the outcome; returns how many alerts our claim still held. A database
    busy now (SQLite's lock held by a long detection pass) is waited out while the
    lease lasts: giving up here would get the message sent twice."""
    deadline = time.monotonic() + settings.alerts_lease_s / 2
    pause = 0.05
    while True:
        try:
            with factory.begin() as session:
                return _apply(session, settings, key, batch, outcome, rng)
        except OperationalError:
            if time.monotonic() + pause > deadline:
                raise
            log.warning("alerts: database busy while recording a delivery; retrying")
            sleep(pause)
            pause = min(pause * 2, 2.0)


def _apply(
    session: Session,
    settings: Settings,
    key: str,
    batch: _Batch,
    outcome: Outcome,
    rng: random.Random,
) -> int:
    now = _now_us()
    alerts = alert_queries.claimed(session, batch.claim)
    if len(alerts) < len(batch.alert_ids):
        lost = sorted(set(batch.alert_ids) - {a.id for a in alerts})
        log.warning("alerts %s: lease ran out before their delivery was recorded", lost)
    free_at = now + int(settings.alerts_min_interval_s * _US)
    until = now
    if outcome.verdict is Verdict.RATE_LIMITED:
        # Slack rate limits the webhook, not the message: every alert waits.
        wait_s = outcome.retry_after_s
        until = now + int(max(wait_s if wait_s is not None else 1.0, 1.0) * _US)
        free_at = max(free_at, until)
    if len(alerts) == len(batch.alert_ids):
        alert_queries.release_webhook(session, key, free_at)
    else:
        # Our lease ran out: another worker may have a message in flight by now, and
        # its hold on the webhook must stay.
        alert_queries.hold_webhook_until(session, key, free_at)
    for alert in alerts:
        alert.updated_us = now
        alert.lease_until_us = None
        alert.last_status = outcome.status
        alert.last_error = None if outcome.verdict is Verdict.SENT else outcome.detail
        if outcome.verdict is Verdict.SENT:
            alert.state, alert.sent_us, alert.errors = alert_queries.SENT, now, 0
        elif outcome.verdict is Verdict.RATE_LIMITED:
            alert.state, alert.next_attempt_us = alert_queries.PENDING, until
        elif outcome.verdict is Verdict.RETRY:
            alert.errors += 1
            if alert.errors >= settings.alerts_max_attempts:
                alert.state = alert_queries.FAILED
            else:
                alert.state = alert_queries.PENDING
                alert.next_attempt_us = now + int(backoff_s(alert.errors, settings, rng) * _US)
        else:
            alert.state = alert_queries.FAILED
    return len(alerts)


def backoff_s(errors: int, settings: Settings, rng: random.Random) -> float:
    """base * 2^(errors-1), capped; "equal jitter": at least half of it, so retries
    stay spaced, the rest random, so workers hit by one outage do not retry in step."""
    ceiling = min(
        settings.alerts_backoff_max_s, settings.alerts_backoff_base_s * 2 ** min(errors - 1, 40)
    )
    return ceiling / 2 + rng.uniform(0, ceiling / 2)
