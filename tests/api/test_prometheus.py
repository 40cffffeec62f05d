"""GET /metrics: Prometheus text with the service's own counters and per (service,
model) gauges of the last hour."""

import time
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text
from sqlalchemy.orm import Session

from service import telemetry
from service.models import Alert, Regression
from service.services.detection import detect
from service.settings import Settings


def scrape(client: TestClient, headers: dict[str, str]) -> dict[tuple[str, tuple[Any, ...]], float]:
    answer = client.get("/metrics", headers=headers)
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain")
    values = {}
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


def records(now_s: float, service: str, n: int, age_s: float, cached: int) -> list[dict[str, Any]]:
    return [
        {
            "request_id": f"{service}-{age_s}-{i}",
            "ts": now_s - age_s + i,
            "service": service,
            "model": "m",
            "prompt_tokens": 1000,
            "cached_tokens": cached,
            "block_size": 100,
            "block_hashes": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
        }
        for i in range(n)
    ]


def accepted(values: dict[tuple[str, tuple[Any, ...]], float], outcome: str) -> float:
    return values[("cachewatch_records_total", (("outcome", outcome),))]


def test_needs_the_read_scope(client: TestClient, ingest_headers: dict[str, str]) -> None:
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers=ingest_headers).status_code == 403


def test_record_counters(
    client: TestClient, ingest_headers: dict[str, str], read_headers: dict[str, str]
) -> None:
    before = scrape(client, read_headers)
    now = time.time()
    body = [*records(now, "a", 3, 60, 500), records(now, "a", 1, 60, 500)[0], {"bad": 1}]
    answer = client.post(
        "/v1/usage", content=b"\n".join(orjson.dumps(r) for r in body), headers=ingest_headers
    )
    assert answer.json() == {
        "accepted": 3,
        "duplicates": 1,
        "rejected": 1,
        "errors": answer.json()["errors"],
    }
    assert client.post("/v1/usage", content=b"\x1f\x8b", headers=ingest_headers).status_code == 400
    after = scrape(client, read_headers)
    for outcome, delta in (("accepted", 3), ("duplicate", 1), ("rejected", 2)):
        assert accepted(after, outcome) - accepted(before, outcome) == delta, outcome


def test_records_are_counted_only_when_committed(session: Session) -> None:
    start = telemetry.RECORDS.labels("accepted")._value.get()
    session.execute(text("SELECT 1"))  # as ingestion does: inside a transaction
    telemetry.count_ingest(session, 5, 0, 0)
    session.rollback()
    assert telemetry.RECORDS.labels("accepted")._value.get() == start
    telemetry.count_ingest(session, 2, 0, 0)
    telemetry.count_ingest(session, 1, 0, 0)
    session.commit()
    assert telemetry.RECORDS.labels("accepted")._value.get() == start + 3


def test_gauges_cover_the_last_hour_per_service_and_model(
    client: TestClient, ingest_headers: dict[str, str], read_headers: dict[str, str]
) -> None:
    now = time.time()
    rows = records(now, "a", 10, 600, 800) + records(now, "a", 10, 7200, 0)  # 2 h ago: out
    rows += records(now, "<b>", 4, 300, 0)
    answer = client.post(
        "/v1/usage", content=b"\n".join(orjson.dumps(r) for r in rows), headers=ingest_headers
    )
    assert answer.status_code == 200
    client.get("/v1/metrics", headers=read_headers)  # the analytics pass catches up
    values = scrape(client, read_headers)
    a = (("model", "m"), ("service", "a"))
    assert values[("cachewatch_hit_rate", a)] == pytest.approx(0.8)
    assert values[("cachewatch_requests_last_hour", a)] == 10
    # Every request repeats the same blocks: all but the first is cacheable.
    assert values[("cachewatch_cacheable_fraction", a)] == pytest.approx(0.9)
    b = (("model", "m"), ("service", "<b>"))
    assert values[("cachewatch_hit_rate", b)] == 0.0


def test_detection_runs_and_alerts(
    client: TestClient, read_headers: dict[str, str], session: Session, settings: Settings
) -> None:
    before = scrape(client, read_headers)
    detect(session, settings)
    regression = Regression(
        service="a",
        model="m",
        change_ts_us=1,
        detected_at_us=1,
        updated_at_us=1,
        status="open",
        before={},
        after={},
        cause="unknown",
        evidence=[],
    )
    session.add(regression)
    session.flush()
    session.add(
        Alert(
            regression_id=regression.id,
            kind="opened",
            state="sent",
            created_us=1,
            updated_us=1,
            next_attempt_us=1,
            attempts=2,
            errors=1,
        )
    )
    session.commit()
    after = scrape(client, read_headers)
    runs = "cachewatch_detection_runs_total"
    assert after[(runs, ())] - before[(runs, ())] == 1
    assert after[("cachewatch_alerts", (("kind", "opened"), ("state", "sent")))] == 1
    assert after[("cachewatch_alert_delivery_attempts_total", (("kind", "opened"),))] == 2
