"""Two `cachewatch serve` processes on one PostgreSQL database, both running the
background jobs on short intervals: they take one stream split in two, with some
batches sent to both (a shipper retrying on the other replica). No record is lost or
stored twice, the rollups count each record once, each regression is recorded once
and each alert reaches Slack once, although both processes ran every job."""

import random
import re
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy import Engine, func, select

from service import migrate
from service.db import make_engine
from service.models import Alert, AnalyticsCursor, Regression, Rollup, UsageRecord
from service.settings import Settings
from tests.alerts.conftest import regression_ids_in
from tests.alerts.fake_slack import FakeSlack
from tests.alerts.test_workers import alert_states, wait_for
from tests.alerts.traffic import drop_records
from tests.conftest import (
    LiveServer,
    drop_database,
    fresh_database_url,
    is_postgres_run,
    make_live_server,
)

BATCH = 100
SENT_TO_BOTH = 0.25  # share of batches also sent to the other server
STEADY = 6_000  # a service whose hit rate never changes: no regression


def stream() -> list[dict[str, Any]]:
    records = drop_records("assistant", "m", recover=True) + drop_records("search", "m2")
    start = records[0]["ts"]
    records += [
        {
            "request_id": f"steady-{i}",
            "ts": start + i * 2,
            "service": "steady",
            "model": "m3",
            "prompt_tokens": 2000,
            "cached_tokens": 1500,
            "prefix_hash": "p",
            "prefix_tokens": 1600,
            "replica": f"pod-{i % 2}",
        }
        for i in range(STEADY)
    ]
    # In time order, as shippers tail logs; the split below still interleaves them.
    return sorted(records, key=lambda r: r["ts"])


@pytest.fixture
def fake_slack() -> Iterator[FakeSlack]:
    fake = FakeSlack().start()
    yield fake
    fake.stop()


@pytest.fixture
def two_servers(
    tmp_path: Path, database_url: str, fake_slack: FakeSlack
) -> Iterator[tuple[list[LiveServer], Engine]]:
    url = fresh_database_url(tmp_path, "writers")
    engine = make_engine(Settings(database_url=url))
    migrate.upgrade(engine)  # once: two servers migrating at once is not the point here
    jobs = {
        "analytics_interval_s": "1",
        "detect_interval_s": "2",
        "alerts_interval_s": "1",
        "slack_webhook_url": fake_slack.url,
        "public_url": "https://cachewatch.example.com",
        "alerts_min_interval_s": "0",
    }
    servers = [make_live_server(tmp_path, url, **jobs) for _ in range(2)]
    for server in servers:
        server.start()
    yield servers, engine
    for server in servers:
        server.stop()
    engine.dispose()
    drop_database(url)


def post_batches(server: LiveServer, token: str, bodies: list[bytes], errors: list[str]) -> None:
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=server.url, headers=headers, timeout=60) as client:
        for body in bodies:
            for _ in range(20):  # 503 (database busy): retry, as a shipper does
                answer = client.post("/v1/usage", content=body)
                if answer.status_code != 503:
                    break
                time.sleep(0.2)
            if answer.status_code != 200 or answer.json()["rejected"]:
                errors.append(f"{answer.status_code} {answer.text[:300]}")


def assert_each_alert_sent_once(fake: FakeSlack, engine: Engine) -> None:
    """Every alert is `sent`, by exactly one message (its claim), and Slack received
    exactly those messages: a regression found while its traffic still streams in
    is in two messages (opened, then resolved), never in one twice."""
    with engine.connect() as conn:
        rows = conn.execute(select(Alert.regression_id, Alert.state, Alert.claim)).all()
    assert {r.state for r in rows} == {"sent"}, rows
    messages = {r.claim for r in rows}
    assert len(fake.delivered) == len(fake.requests()) == len(messages)
    mentioned = Counter(i for payload in fake.delivered for i in regression_ids_in(payload))
    per_message = {(r.regression_id, r.claim) for r in rows}
    assert mentioned == Counter(regression for regression, _ in per_message)


def scraped(server: LiveServer, token: str, name: str) -> float:
    text = httpx.get(f"{server.url}/metrics", headers={"Authorization": f"Bearer {token}"}).text
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match is not None, f"{name} not in /metrics"
    return float(match.group(1))


@pytest.mark.slow
@pytest.mark.skipif(
    not is_postgres_run(),
    reason="several server processes on one database: PostgreSQL's deployment (run with "
    "CACHEWATCH_TEST_DATABASE_URL=postgresql+psycopg://...)",
)
def test_two_servers_share_a_stream_and_run_each_job_once(
    two_servers: tuple[list[LiveServer], Engine], fake_slack: FakeSlack
) -> None:
    servers, engine = two_servers
    records = stream()
    bodies = [
        b"\n".join(orjson.dumps(r) for r in records[i : i + BATCH])
        for i in range(0, len(records), BATCH)
    ]
    rng = random.Random(3)
    share: list[list[bytes]] = [[], []]
    overlap = 0
    for n, body in enumerate(bodies):
        share[n % 2].append(body)
        if rng.random() < SENT_TO_BOTH:
            share[1 - n % 2].append(body)  # the retry went to the other replica
            overlap += body.count(b"\n") + 1
    token = servers[0].token("ingest")
    read = servers[0].token("read")
    errors: list[str] = []
    shippers = [
        threading.Thread(target=post_batches, args=(server, token, mine, errors))
        for server, mine in zip(servers, share, strict=True)
    ]
    for shipper in shippers:
        shipper.start()
    began = time.monotonic()
    for shipper in shippers:
        shipper.join(300)
    assert not errors, errors[:3]
    shipped_s = time.monotonic() - began

    def settled() -> bool:
        states = alert_states(engine)
        return len(states) == 3 and {s for _, _, s in states} == {"sent"}

    logs = " / ".join(s.log_path.read_text()[-1500:] for s in servers if s.log_path)
    wait_for(settled, 120, f"both regressions alerted; server logs: {logs}")
    settled_s = time.monotonic() - began
    time.sleep(5)  # several more runs of every job in both processes
    print(f"shipped in {shipped_s:.1f}s, alerts sent after {settled_s:.1f}s")

    with engine.connect() as conn:
        stored = conn.execute(select(UsageRecord.request_id)).scalars().all()
        max_id = conn.scalar(select(func.max(UsageRecord.id)))
        cursor = conn.scalar(select(AnalyticsCursor.last_id).where(AnalyticsCursor.name == "usage"))
        rolled = {
            grain: conn.execute(
                select(func.sum(Rollup.requests), func.sum(Rollup.prompt_tokens)).where(
                    Rollup.grain_s == grain
                )
            ).one()
            for grain in (60, 3600)
        }
        regressions = conn.execute(select(Regression.service, Regression.model)).all()
        alerts = conn.scalar(select(func.count()).select_from(Alert))
    # Every record once, nothing lost.
    assert len(stored) == len(set(stored)) == len(records)
    assert set(stored) == {r["request_id"] for r in records}
    # Analytics: the cursor at the last record, each record counted once per grain.
    assert cursor == max_id
    prompt_tokens = sum(r["prompt_tokens"] for r in records)
    assert rolled[60] == rolled[3600] == (len(records), prompt_tokens)
    # Detection and alerts: each regression once, each alert sent once.
    assert sorted(regressions) == [("assistant", "m"), ("search", "m2")]
    assert alerts == 3
    assert_each_alert_sent_once(fake_slack, engine)
    # ... although both processes took part in ingesting and ran detection.
    outcome = 'cachewatch_records_total{{outcome="{}"}}'.format
    accepted = [scraped(s, read, outcome("accepted")) for s in servers]
    duplicates = [scraped(s, read, outcome("duplicate")) for s in servers]
    assert sum(accepted) == len(records) and all(a > 0 for a in accepted), accepted
    assert sum(duplicates) == overlap, (duplicates, overlap)
    runs = [scraped(s, read, "cachewatch_detection_runs_total") for s in servers]
    assert all(r >= 2 for r in runs), runs
