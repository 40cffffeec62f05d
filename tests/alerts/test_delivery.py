"""Delivery against a fake Slack on loopback: one message per regression, Slack's
answers (429 + Retry-After, 5xx, 4xx), connection errors, the per-webhook rate,
digests and the no-webhook state."""

import itertools
import time

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from service.alerts import outbox
from service.alerts.delivery import deliver_due
from service.repository import alerts as alert_queries
from service.settings import Settings
from tests.alerts.conftest import (
    add_regression,
    alert_settings,
    alerts_of,
    deliver_until,
    regression_ids_in,
)
from tests.alerts.fake_slack import Answer, FakeSlack
from tests.conftest import free_port

Factory = sessionmaker[Session]


def test_one_message_per_regression(
    session: Session, session_factory: Factory, slack_settings: Settings, fake_slack: FakeSlack
) -> None:
    first = add_regression(session)
    session.commit()
    report = deliver_due(session_factory, slack_settings)
    assert (report.messages, report.sent) == (1, 1)
    second = add_regression(session, service="search-agent", cause="routing")
    session.commit()
    deliver_due(session_factory, slack_settings)
    for _ in range(3):  # later passes find nothing to send
        assert deliver_due(session_factory, slack_settings).messages == 0
    assert [regression_ids_in(p) for p in fake_slack.delivered] == [[first.id], [second.id]]
    assert len(fake_slack.requests()) == 2
    alerts = alerts_of(session, [first.id, second.id])
    assert [(a.kind, a.state, a.attempts, a.last_status) for a in alerts] == [
        ("opened", "sent", 1, 200),
        ("opened", "sent", 1, 200),
    ]
    assert all(a.sent_us and a.claim for a in alerts)


def test_several_regressions_at_once_become_one_digest(
    session: Session, session_factory: Factory, slack_settings: Settings, fake_slack: FakeSlack
) -> None:
    ids = [add_regression(session, service=f"svc-{i}").id for i in range(3)]
    session.commit()
    deliver_due(session_factory, slack_settings)
    assert len(fake_slack.delivered) == 1
    digest = fake_slack.delivered[0]
    assert regression_ids_in(digest) == ids
    assert digest["blocks"][0]["text"]["text"] == "cachewatch: 3 cache regressions"
    alerts = alerts_of(session, ids)
    assert {a.state for a in alerts} == {"sent"}
    assert len({a.claim for a in alerts}) == 1  # one delivery carried them


def test_a_digest_holds_at_most_alerts_digest_max(
    session: Session, session_factory: Factory, settings: Settings, fake_slack: FakeSlack
) -> None:
    ids = [add_regression(session, service=f"svc-{i}").id for i in range(5)]
    session.commit()
    deliver_due(session_factory, alert_settings(settings, fake_slack.url, alerts_digest_max=2))
    assert [regression_ids_in(p) for p in fake_slack.delivered] == [ids[:2], ids[2:4], ids[4:]]


def test_429_is_retried_once_no_sooner_than_retry_after(
    session: Session, session_factory: Factory, slack_settings: Settings, fake_slack: FakeSlack
) -> None:
    fake_slack.answer(Answer(429, "rate_limited", {"Retry-After": "1"}))
    regression = add_regression(session)
    session.commit()
    deliver_until(session_factory, slack_settings, lambda: len(fake_slack.delivered) == 1)
    for _ in range(3):
        deliver_due(session_factory, slack_settings)
    limited, accepted = fake_slack.requests()
    assert limited.answer.status == 429 and accepted.answer.status == 200
    assert accepted.received_at - limited.answered_at >= 1.0
    assert accepted.payload == limited.payload  # the same message, delivered once
    assert len(fake_slack.delivered) == 1
    [alert] = alerts_of(session, [regression.id])
    # A 429 is Slack pacing us, not a failure: it does not count towards giving up.
    assert (alert.state, alert.attempts, alert.errors) == ("sent", 2, 0)


def test_429_holds_every_alert_of_the_webhook(
    session: Session, session_factory: Factory, settings: Settings, fake_slack: FakeSlack
) -> None:
    """Slack rate limits the webhook: the next alert waits too, not only the refused."""
    fake_slack.answer(Answer(429, "rate_limited", {"Retry-After": "1"}))
    add_regression(session)
    session.commit()
    one_each = alert_settings(settings, fake_slack.url, alerts_digest_max=1)
    deliver_due(session_factory, one_each)
    add_regression(session, service="other")
    session.commit()
    deliver_until(session_factory, one_each, lambda: len(fake_slack.delivered) == 2)
    limited, *rest = fake_slack.requests()
    assert all(r.received_at - limited.answered_at >= 1.0 for r in rest)


def test_three_500s_then_the_message_once_with_growing_backoff(
    session: Session, session_factory: Factory, slack_settings: Settings, fake_slack: FakeSlack
) -> None:
    fake_slack.answer(*[Answer(500, "internal_error")] * 3)
    regression = add_regression(session)
    session.commit()
    deliver_until(session_factory, slack_settings, lambda: len(fake_slack.delivered) == 1)
    for _ in range(3):
        deliver_due(session_factory, slack_settings)
    requests = fake_slack.requests()
    assert [r.answer.status for r in requests] == [500, 500, 500, 200]
    assert len(fake_slack.delivered) == 1
    # Backoff base * 2^(n-1) with equal jitter: at least half of it each time.
    base = slack_settings.alerts_backoff_base_s
    for n, (failed, retry) in enumerate(itertools.pairwise(requests), start=1):
        assert retry.received_at - failed.answered_at >= base * 2 ** (n - 1) / 2
    [alert] = alerts_of(session, [regression.id])
    assert (alert.state, alert.attempts, alert.errors, alert.last_error) == ("sent", 4, 0, None)


def test_5xx_gives_up_after_the_attempt_limit(
    session: Session, session_factory: Factory, settings: Settings, fake_slack: FakeSlack
) -> None:
    fake_slack.answer(*[Answer(503, "service_unavailable")] * 10)
    limited = alert_settings(settings, fake_slack.url, alerts_max_attempts=3)
    regression = add_regression(session)
    session.commit()
    deliver_until(
        session_factory, limited, lambda: alerts_of(session, [regression.id])[0].state == "failed"
    )
    time.sleep(0.5)
    deliver_due(session_factory, limited)
    assert [r.answer.status for r in fake_slack.requests()] == [503, 503, 503]
    [alert] = alerts_of(session, [regression.id])
    assert (alert.last_status, alert.last_error) == (503, "service_unavailable")


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (410, "channel_is_archived"),
        (400, "invalid_payload"),
        (403, "invalid_token"),
        (404, "no_service"),
    ],
)
def test_permanent_refusals_stop_and_show_failed_with_slacks_answer(
    status: int,
    body: str,
    session: Session,
    session_factory: Factory,
    slack_settings: Settings,
    fake_slack: FakeSlack,
    client: TestClient,
    read_headers: dict[str, str],
) -> None:
    fake_slack.answer(Answer(status, body))
    regression = add_regression(session)
    session.commit()
    deliver_due(session_factory, slack_settings)
    for _ in range(3):
        time.sleep(0.05)
        assert deliver_due(session_factory, slack_settings).messages == 0
    assert len(fake_slack.requests()) == 1 and fake_slack.delivered == []
    [shown] = client.get(f"/v1/alerts?regression_id={regression.id}", headers=read_headers).json()
    assert (shown["state"], shown["last_status"], shown["last_error"]) == (
        "failed",
        status,
        body,
    )


def test_connection_errors_are_retried(
    session: Session, session_factory: Factory, settings: Settings, fake_slack: FakeSlack
) -> None:
    down = alert_settings(settings, f"http://127.0.0.1:{free_port()}/hook")
    regression = add_regression(session)
    session.commit()
    assert deliver_due(session_factory, down).retried == 1
    [alert] = alerts_of(session, [regression.id])
    assert (alert.state, alert.errors, alert.last_status) == ("pending", 1, None)
    assert alert.last_error is not None and "ConnectError" in alert.last_error
    # The same alert reaches Slack once it answers (here: the webhook now reachable).
    up = alert_settings(settings, fake_slack.url)
    deliver_until(session_factory, up, lambda: len(fake_slack.delivered) == 1)
    assert regression_ids_in(fake_slack.delivered[0]) == [regression.id]


def test_at_most_one_message_per_second_per_webhook(
    session: Session, session_factory: Factory, settings: Settings, fake_slack: FakeSlack
) -> None:
    paced = alert_settings(settings, fake_slack.url, alerts_digest_max=1, alerts_min_interval_s=1.0)
    for i in range(3):
        add_regression(session, service=f"svc-{i}")
    session.commit()
    assert deliver_due(session_factory, paced).sent == 3  # one run, paced inside it
    arrivals = [r.received_at for r in fake_slack.requests()]
    assert len(arrivals) == 3
    assert all(b - a >= 1.0 for a, b in itertools.pairwise(arrivals))


def test_without_a_webhook_alerts_wait_as_no_webhook(
    session: Session, session_factory: Factory, settings: Settings, fake_slack: FakeSlack
) -> None:
    regression = add_regression(session)
    session.commit()
    report = deliver_due(session_factory, alert_settings(settings, None))
    assert report.waiting_for_webhook == 1 and report.messages == 0
    [alert] = alerts_of(session, [regression.id])
    assert (alert.state, alert.attempts) == ("no_webhook", 0)
    # Configured later (the demo's local sink, a new webhook): they are delivered.
    deliver_due(session_factory, alert_settings(settings, fake_slack.url))
    assert [regression_ids_in(p) for p in fake_slack.delivered] == [[regression.id]]


def test_resolution_never_goes_before_its_opening(
    session: Session, session_factory: Factory, settings: Settings, fake_slack: FakeSlack
) -> None:
    # A backoff of 0.5 to 1 s: long enough to try the resolution while it runs.
    slack_settings = alert_settings(settings, fake_slack.url, alerts_backoff_base_s=1.0)
    fake_slack.answer(Answer(500, "internal_error"))
    regression = add_regression(session)
    session.commit()
    deliver_due(session_factory, slack_settings)  # the opening fails: backoff
    regression.status, regression.resolved_at_us = (
        "resolved",
        regression.change_ts_us + 3600 * 10**6,
    )
    outbox.enqueue_for_detection(session, [], [regression], time.time_ns() // 1000)
    session.commit()
    deliver_due(session_factory, slack_settings)  # the opening is not due yet
    assert len(fake_slack.requests()) == 1
    deliver_until(
        session_factory,
        slack_settings,
        lambda: {a.state for a in alerts_of(session, [regression.id])} == {"sent"},
    )
    # Both went together: one message, the opening that says it already resolved.
    [message] = fake_slack.delivered
    assert regression_ids_in(message) == [regression.id]
    assert "Already resolved" in str(message)
    assert len({a.claim for a in alerts_of(session, [regression.id])}) == 1


def test_a_resolution_after_the_opening_is_its_own_short_message(
    session: Session, session_factory: Factory, slack_settings: Settings, fake_slack: FakeSlack
) -> None:
    regression = add_regression(session)
    session.commit()
    deliver_due(session_factory, slack_settings)
    regression.status, regression.resolved_at_us = (
        "resolved",
        regression.change_ts_us + 3600 * 10**6,
    )
    outbox.enqueue_for_detection(session, [], [regression], time.time_ns() // 1000)
    session.commit()
    deliver_due(session_factory, slack_settings)
    opened, resolved = fake_slack.delivered
    assert resolved["blocks"][0]["text"]["text"].startswith("Resolved: assistant/")
    assert len(resolved["blocks"]) < len(opened["blocks"])


def test_a_claimed_alert_is_left_alone_until_its_lease_ends(
    session: Session, session_factory: Factory, slack_settings: Settings, fake_slack: FakeSlack
) -> None:
    """Another worker holds it (even one sending to another webhook, as after a
    change of URL): it is not sent again before the lease runs out."""
    regression = add_regression(session)
    session.commit()
    now = time.time_ns() // 1000
    lease_end = now + 1_000_000
    with session_factory.begin() as other_worker:
        [claimed] = alert_queries.claim_due(other_worker, now, 10, "other-worker", lease_end)
    assert claimed.regression_id == regression.id
    assert deliver_due(session_factory, slack_settings).messages == 0
    deliver_until(session_factory, slack_settings, lambda: len(fake_slack.delivered) == 1)
    assert time.time_ns() // 1000 >= lease_end
    [alert] = alerts_of(session, [regression.id])
    assert (alert.state, alert.attempts) == ("sent", 2)
