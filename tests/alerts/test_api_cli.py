"""`GET /v1/alerts` and `cachewatch alerts test`."""

import os
from typing import NamedTuple

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from service.alerts.delivery import deliver_due
from service.cli import app
from service.settings import Settings, get_settings
from tests.alerts.conftest import add_regression
from tests.alerts.fake_slack import Answer, FakeSlack, slack_check


def test_alerts_list_their_delivery_state(
    session: Session,
    session_factory: sessionmaker[Session],
    slack_settings: Settings,
    fake_slack: FakeSlack,
    client: TestClient,
    read_headers: dict[str, str],
    make_token,  # type: ignore[no-untyped-def]
) -> None:
    assert client.get("/v1/alerts").status_code == 401
    ingest_only = {"Authorization": f"Bearer {make_token('ingest')}"}
    assert client.get("/v1/alerts", headers=ingest_only).status_code == 403

    sent = add_regression(session)
    session.commit()
    deliver_due(session_factory, slack_settings)
    fake_slack.answer(Answer(500, "internal_error"))
    retrying = add_regression(session, service="search-agent")
    session.commit()
    deliver_due(session_factory, slack_settings)

    listed = client.get("/v1/alerts", headers=read_headers).json()
    mine = [a for a in listed if a["regression_id"] in (sent.id, retrying.id)]
    assert [(a["regression_id"], a["service"], a["kind"], a["state"]) for a in mine] == [
        (retrying.id, "search-agent", "opened", "pending"),
        (sent.id, "assistant", "opened", "sent"),
    ]
    pending, done = mine
    assert pending["attempts"] == 1 and pending["last_status"] == 500
    assert pending["last_error"] == "internal_error" and pending["next_attempt_at"]
    assert done["sent_at"] and done["last_status"] == 200 and done["next_attempt_at"] is None
    assert done["delivery_id"] and done["last_error"] is None

    only_sent = client.get("/v1/alerts?state=sent&service=assistant", headers=read_headers)
    assert sent.id in {a["regression_id"] for a in only_sent.json()}
    assert {a["state"] for a in only_sent.json()} == {"sent"}
    assert client.get("/v1/alerts?state=lost", headers=read_headers).status_code == 422


class CliRun(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


def _alerts_test(webhook: str | None, monkeypatch: pytest.MonkeyPatch) -> CliRun:
    """In process (the CLI's imports take seconds in a subprocess); settings come from
    the environment as in a real run."""
    for name in [k for k in os.environ if k.startswith("CACHEWATCH_")]:
        monkeypatch.delenv(name)
    if webhook is not None:
        monkeypatch.setenv("CACHEWATCH_SLACK_WEBHOOK_URL", webhook)
    monkeypatch.setenv("CACHEWATCH_PUBLIC_URL", "https://cachewatch.example.com")
    get_settings.cache_clear()
    try:
        result = CliRunner().invoke(app, ["alerts", "test"])
    finally:
        get_settings.cache_clear()
    return CliRun(result.exit_code, result.stdout, result.stderr)


def test_alerts_test_sends_a_test_message(
    fake_slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _alerts_test(fake_slack.url, monkeypatch)
    assert run.returncode == 0, run.stderr
    assert "sent" in run.stdout
    [message] = fake_slack.delivered
    assert slack_check(message) is None
    assert "test message" in message["text"] and "cachewatch.example.com" in message["text"]


def test_alerts_test_reports_slacks_refusal(
    fake_slack: FakeSlack, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_slack.answer(Answer(410, "channel_is_archived"))
    run = _alerts_test(fake_slack.url, monkeypatch)
    assert run.returncode == 1
    assert "HTTP 410" in run.stderr and "channel_is_archived" in run.stderr


def test_alerts_test_without_a_webhook(monkeypatch: pytest.MonkeyPatch) -> None:
    run = _alerts_test(None, monkeypatch)
    assert run.returncode == 2 and "CACHEWATCH_SLACK_WEBHOOK_URL" in run.stderr
