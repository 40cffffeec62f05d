"""Slack hanging does not hold up cachewatch: with the alerts job stuck in a send to
a webhook that never answers, a real server keeps ingesting and detecting (and
queues the new alerts), at full speed."""

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import orjson

from service import migrate
from service.db import make_engine, make_sessionmaker
from service.services.tokens import Scope, create_token
from service.settings import Settings
from tests.alerts.fake_slack import FakeSlack
from tests.alerts.traffic import drop_records
from tests.conftest import drop_database, fresh_database_url, make_live_server


def ndjson(records: Sequence[dict[str, Any]]) -> bytes:
    return b"\n".join(orjson.dumps(r) for r in records)


def test_ingestion_and_detection_keep_working_while_slack_hangs(
    tmp_path: Path, database_url: str, fake_slack: FakeSlack
) -> None:
    fake_slack.delay_s = 120  # accepts the request and never answers (released at teardown)
    url = fresh_database_url(tmp_path, "slackdown")
    server = make_live_server(
        tmp_path,
        url,
        slack_webhook_url=fake_slack.url,
        alerts_interval_s="1",
        alerts_http_timeout_s="60",
        alerts_lease_s="300",
        # Only the test's own detection passes: their timing is what is measured.
        detect_interval_s="3600",
    )
    # Tokens straight in the database: `cachewatch token create` takes seconds a call.
    engine = make_engine(Settings(database_url=url))
    migrate.upgrade(engine)
    with make_sessionmaker(engine).begin() as session:
        ingest = {"Authorization": f"Bearer {create_token(session, Scope.INGEST, 'test')}"}
        admin = {"Authorization": f"Bearer {create_token(session, Scope.ADMIN, 'test')}"}
    engine.dispose()
    server.start()
    try:
        first = drop_records("assistant", "m")
        answer = httpx.post(f"{server.url}/v1/usage", content=ndjson(first), headers=ingest)
        assert answer.json()["accepted"] == len(first)
        detected = httpx.post(f"{server.url}/v1/detect", headers=admin, timeout=60).json()
        assert [r["service"] for r in detected] == ["assistant"]

        deadline = time.monotonic() + 20
        while not fake_slack.arrivals:  # the alerts job is now stuck in its send
            assert time.monotonic() < deadline, "the alert was never sent"
            time.sleep(0.05)

        started = time.monotonic()
        more = drop_records("search", "m2")
        answer = httpx.post(
            f"{server.url}/v1/usage", content=ndjson(more), headers=ingest, timeout=20
        )
        assert answer.status_code == 200 and answer.json()["accepted"] == len(more)
        detected = httpx.post(f"{server.url}/v1/detect", headers=admin, timeout=60).json()
        elapsed = time.monotonic() - started
        assert {r["service"] for r in detected} == {"assistant", "search"}
        # Far below the 60 s the send may still hang: nothing waited for Slack.
        assert elapsed < 15, elapsed

        alerts = httpx.get(f"{server.url}/v1/alerts", headers=admin).json()
        assert {(a["service"], a["state"]) for a in alerts} == {
            ("assistant", "sending"),
            ("search", "pending"),
        }
        assert len(fake_slack.arrivals) == 1  # one message in flight per webhook
    finally:
        server.stop()
        drop_database(url)
