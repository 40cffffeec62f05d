"""Exactly one message per (regression, kind) across worker restarts and two workers
at once, against a fake Slack; and the documented crash window: a worker killed
while its message is in flight holds the alert for the lease, then it is sent again."""

import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, sessionmaker

from service import migrate
from service.alerts.delivery import deliver_due
from service.db import make_engine, make_sessionmaker
from service.models import Alert, Regression
from service.settings import Settings
from tests.alerts.conftest import add_regression, alert_settings, regression_ids_in
from tests.alerts.fake_slack import Answer, FakeSlack
from tests.alerts.traffic import drop_records
from tests.conftest import PROJECT_ROOT, drop_database, fresh_database_url
from tests.simulated import load_records


@pytest.fixture
def fresh_db(tmp_path: Path, database_url: str) -> Iterator[tuple[str, Engine]]:
    """A migrated database of its own: these tests run separate processes."""
    url = fresh_database_url(tmp_path, "alerts")
    engine = make_engine(Settings(database_url=url))
    migrate.upgrade(engine)
    yield url, engine
    engine.dispose()
    drop_database(url)


def process_env(url: str, webhook: str, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEWATCH_")}
    env.update(
        {
            "CACHEWATCH_DATABASE_URL": url,
            "CACHEWATCH_SLACK_WEBHOOK_URL": webhook,
            "CACHEWATCH_PUBLIC_URL": "https://cachewatch.example.com",
            "CACHEWATCH_ALERTS_MIN_INTERVAL_S": "0",
            "CACHEWATCH_ALERTS_BACKOFF_BASE_S": "0.05",
        }
    )
    env.update({f"CACHEWATCH_{k.upper()}": v for k, v in settings.items()})
    return env


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def alert_states(engine: Engine) -> list[tuple[int, str, str]]:
    with engine.connect() as conn:
        return [
            (r.regression_id, r.kind, r.state)
            for r in conn.execute(
                select(Alert.regression_id, Alert.kind, Alert.state).order_by(Alert.id)
            )
        ]


def assert_each_alert_delivered_once(fake: FakeSlack, engine: Engine) -> None:
    """Every regression with alerts is in exactly one delivered message, and every
    message Slack accepted carried alerts that are recorded as sent."""
    states = alert_states(engine)
    assert states and {state for _, _, state in states} == {"sent"}, states
    mentioned = Counter(i for payload in fake.delivered for i in regression_ids_in(payload))
    assert mentioned == Counter({regression_id for regression_id, _, _ in states})
    with engine.connect() as conn:
        deliveries = conn.scalar(select(func.count(func.distinct(Alert.claim))))
    assert deliveries == len(fake.delivered) == len(fake.requests())


def start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "service.cli", "worker"],
        env=env,
        cwd=PROJECT_ROOT,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )


def stop(process: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    if process.poll() is None:
        process.send_signal(sig)
        process.wait(20)


def test_restarting_the_worker_never_sends_twice(
    fresh_db: tuple[str, Engine], fake_slack: FakeSlack, tmp_path: Path
) -> None:
    """The real `cachewatch worker`: detection queues, delivery sends; killed and
    started again, it re-detects the same regressions and sends nothing more."""
    url, engine = fresh_db
    with make_sessionmaker(engine).begin() as session:
        records = drop_records("assistant", "m", recover=True) + drop_records("search", "m2")
        load_records(session, records, [])
    env = process_env(
        url,
        fake_slack.url,
        analytics_interval_s="1",
        detect_interval_s="1",
        alerts_interval_s="1",
    )
    log = tmp_path / "worker.log"
    worker = start_worker(env, log)
    try:
        # Two regressions: one still open, one found already over (opened + resolved,
        # one entry): a digest of both.
        wait_for(
            lambda: (
                len(alert_states(engine)) == 3
                and {s for _, _, s in alert_states(engine)} == {"sent"}
            ),
            60,
            f"the first delivery; worker log: {log.read_text()[-2000:]}",
        )
        stop(worker)
        restarted_at_us = time.time_ns() // 1000
        worker = start_worker(env, log)

        def redetected() -> bool:
            with engine.connect() as conn:
                oldest = conn.scalar(select(func.min(Regression.updated_at_us)))
            return oldest is not None and oldest > restarted_at_us

        wait_for(redetected, 60, "detection after the restart")
        time.sleep(2.5)  # two more runs of the alerts job
    finally:
        stop(worker, signal.SIGTERM)
    assert len(fake_slack.delivered) == 1
    assert_each_alert_delivered_once(fake_slack, engine)


def _regressions_with_alerts(engine: Engine, count: int) -> list[int]:
    with make_sessionmaker(engine).begin() as session:
        return [add_regression(session, service=f"svc-{i:02d}").id for i in range(count)]


def test_two_workers_at_once_never_send_twice(
    fresh_db: tuple[str, Engine], fake_slack: FakeSlack
) -> None:
    """Two delivery processes drain one outbox, one alert per message: each alert is
    sent once, both take part, and together they keep the webhook's pace."""
    url, engine = fresh_db
    ids = _regressions_with_alerts(engine, 16)
    fake_slack.delay_s = 0.03  # Slack takes a moment: claims and sends overlap
    env = process_env(url, fake_slack.url, alerts_digest_max="1", alerts_min_interval_s="0.1")
    workers = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.alerts.worker_loop", "30"],
            env=env,
            cwd=PROJECT_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for _ in range(2)
    ]
    for worker in workers:  # both imported and connected; then both start at once
        assert worker.stdout is not None and worker.stdout.readline() == b"ready\n"
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.write(b"go\n")
        worker.stdin.flush()
    outputs = [w.communicate(timeout=60) for w in workers]
    assert [w.returncode for w in workers] == [0, 0], [e[-3000:] for _, e in outputs]
    totals: list[dict[str, Any]] = [json.loads(out) for out, _ in outputs]
    assert sum(t["sent"] for t in totals) == len(ids)
    assert all(t["messages"] > 0 for t in totals), totals  # both took part
    assert_each_alert_delivered_once(fake_slack, engine)
    arrivals = [r.received_at for r in fake_slack.requests()]
    assert all(b - a >= 0.1 for a, b in itertools.pairwise(arrivals))


def test_a_worker_killed_mid_send_holds_the_alert_for_its_lease(
    fresh_db: tuple[str, Engine], fake_slack: FakeSlack, settings: Settings
) -> None:
    """The documented crash window (docs/alerts.md): the message is in flight when
    its worker dies, so nobody knows whether Slack has it. No other worker sends it
    while the lease lasts; after the lease it is sent again, at least once overall."""
    url, engine = fresh_db
    [regression_id] = _regressions_with_alerts(engine, 1)
    fake_slack.answer(Answer(200, "ok", delay_s=5))  # the first answer takes 5 s
    # The lease is far shorter than the real default (120 s) to keep the test short;
    # the timeout stays above the slow answer, so only the kill interrupts it.
    lease = {"alerts_lease_s": "3", "alerts_http_timeout_s": "20"}
    env = process_env(url, fake_slack.url, **lease)
    first = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "alerts", "deliver"],
        env=env,
        cwd=PROJECT_ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(lambda: len(fake_slack.arrivals) == 1, 30, "the first worker's message")
    finally:
        stop(first)
    with engine.connect() as conn:
        state, lease_until_us = conn.execute(select(Alert.state, Alert.lease_until_us)).one()
    assert state == "sending" and lease_until_us is not None

    second = alert_settings(
        settings.model_copy(update={"database_url": url}),
        fake_slack.url,
        alerts_lease_s=3.0,
        alerts_http_timeout_s=20.0,
    )
    factory: sessionmaker[Session] = make_sessionmaker(engine)
    while time.time_ns() // 1000 < lease_until_us - 200_000:
        assert deliver_due(factory, second).messages == 0
        time.sleep(0.1)
    assert len(fake_slack.arrivals) == 1  # nobody else sent it during the lease
    wait_for(lambda: deliver_due(factory, second).sent == 1, 10, "the resend after the lease")
    assert len(fake_slack.arrivals) == 2
    assert alert_states(engine) == [(regression_id, "opened", "sent")]
