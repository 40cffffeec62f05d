import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import event, select
from sqlalchemy.orm import Session

from service.models import RejectedRecord
from service.services.events import MAX_EVENTS_PER_REQUEST

DEPLOY = {"ts": "2026-11-29T14:02:00Z", "service": "assistant", "kind": "deploy", "deploy": "v42"}


def test_posting_the_same_event_twice_stores_it_once(
    client: TestClient, ingest_headers: dict[str, str], read_headers: dict[str, str]
) -> None:
    first = client.post("/v1/events", json=DEPLOY, headers=ingest_headers)
    second = client.post("/v1/events", json=DEPLOY, headers=ingest_headers)
    assert first.status_code == second.status_code == 200
    assert first.json()["id"] == second.json()["id"]
    assert first.json()["source"] == "posted"
    listed = client.get("/v1/events", headers=read_headers).json()
    assert [e["deploy"] for e in listed] == ["v42"]
    assert listed[0]["ts"] == "2026-11-29T14:02:00Z"


def test_events_array_filters_and_newest_first(
    client: TestClient, ingest_headers: dict[str, str], read_headers: dict[str, str]
) -> None:
    events = [
        DEPLOY,
        {"ts": 1795961000, "service": "assistant", "kind": "replicas", "replicas": 4},
        {"ts": 1795962000, "service": "search", "kind": "config", "description": "kv 8Gi"},
        {"ts": 1795963000, "service": "assistant", "kind": "note", "model": "m"},
    ]
    answer = client.post("/v1/events", json=events, headers=ingest_headers)
    assert answer.status_code == 200 and len(answer.json()) == 4
    assistant = client.get("/v1/events?service=assistant", headers=read_headers).json()
    assert [e["kind"] for e in assistant] == ["note", "replicas", "deploy"]
    ranged = client.get(
        "/v1/events", params={"from": "1795960990", "to": 1795962500}, headers=read_headers
    ).json()
    assert [e["kind"] for e in ranged] == ["config", "replicas"]
    by_kind = client.get("/v1/events?kind=replicas", headers=read_headers).json()
    assert by_kind[0]["replicas"] == 4


def test_invalid_events_are_rejected_with_the_reason_and_kept(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    missing_tag = {"ts": 1764424000, "service": "assistant", "kind": "deploy"}
    answer = client.post("/v1/events", json=missing_tag, headers=ingest_headers)
    assert answer.status_code == 422
    assert "deploy" in answer.json()["error"]
    bad_kind = client.post("/v1/events", json={**DEPLOY, "kind": "party"}, headers=ingest_headers)
    assert bad_kind.status_code == 422
    not_json = client.post("/v1/events", content=b"{", headers=ingest_headers)
    assert not_json.status_code == 400
    kept = session.scalars(select(RejectedRecord.endpoint)).all()
    assert kept == ["events", "events", "events"]


def test_event_endpoints_need_the_right_scope(
    client: TestClient, ingest_headers: dict[str, str], read_headers: dict[str, str]
) -> None:
    assert client.post("/v1/events", json=DEPLOY).status_code == 401
    assert client.post("/v1/events", json=DEPLOY, headers=read_headers).status_code == 403
    assert client.get("/v1/events", headers=ingest_headers).status_code == 403
    assert client.get("/v1/events?from=garbage", headers=read_headers).status_code == 422


@pytest.mark.parametrize(
    ("ts", "says"),
    [
        ("0001-01-01T00:00:00+14:00", "year must be from 1970 to 2099"),  # was a 500
        ("9999-12-31T23:59:59-14:00", "year must be from 1970 to 2099"),  # was a 500
        ("2026-01-01", "not an RFC 3339 timestamp"),  # was accepted
        ("20260101T000000Z", "not an RFC 3339 timestamp"),  # was accepted
        ("2026-01-01T00:00:00Z\u0000", "not an RFC 3339 timestamp"),  # was accepted
        (4_102_444_800, "before 2100"),
    ],
)
def test_event_times_outside_rfc3339_or_the_range_are_422(
    client: TestClient, ingest_headers: dict[str, str], session: Session, ts: object, says: str
) -> None:
    answer = client.post("/v1/events", json={**DEPLOY, "ts": ts}, headers=ingest_headers)
    assert answer.status_code == 422, answer.text
    assert says in answer.json()["error"]
    assert session.scalars(select(RejectedRecord.reason)).all() == [answer.json()["error"]]


def test_a_large_array_is_stored_in_a_few_statements(
    client: TestClient, ingest_headers: dict[str, str], read_headers: dict[str, str], app: FastAPI
) -> None:
    """Before: two statements per event; 120,000 events held SQLite's write lock for
    40 s, and every concurrent ingest answered 503."""
    events = [
        {"ts": 1_764_399_600 + i, "service": f"s{i % 7}", "kind": "note", "description": str(i)}
        for i in range(MAX_EVENTS_PER_REQUEST)
    ]
    events.append(events[5])  # a repeat within the body is stored once
    events.pop(0)
    statements = count_statements(app)
    answer = client.post("/v1/events", json=events, headers=ingest_headers)
    assert answer.status_code == 200
    assert len(statements) < 2 * MAX_EVENTS_PER_REQUEST // 500 + 20
    stored = answer.json()
    assert [e["description"] for e in stored] == [e["description"] for e in events]
    assert stored[4]["id"] == stored[-1]["id"]
    listed = client.get("/v1/events", params={"limit": 10_000}, headers=read_headers).json()
    assert len(listed) == MAX_EVENTS_PER_REQUEST - 1
    again = client.post("/v1/events", json=events[:3], headers=ingest_headers).json()
    assert [e["id"] for e in again] == [e["id"] for e in stored[:3]]


def test_more_events_than_one_request_takes_is_413_and_kept(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    events = [{**DEPLOY, "deploy": f"v{i}"} for i in range(MAX_EVENTS_PER_REQUEST + 1)]
    answer = client.post("/v1/events", json=events, headers=ingest_headers)
    assert answer.status_code == 413
    assert "at most 10,000 per request" in answer.json()["error"]
    assert session.scalars(select(RejectedRecord.endpoint)).all() == ["events"]


def count_statements(app: FastAPI) -> list[str]:
    """The SQL statements run from now on on the app's connection."""
    statements: list[str] = []
    bind = app.state.sessionmaker.kw["bind"]
    event.listen(bind, "before_cursor_execute", lambda *args: statements.append(args[2]))
    return statements


@pytest.mark.parametrize(("replicas", "status"), [(4.0, 200), (4.5, 422), ("4", 422), (True, 422)])
def test_replicas_is_a_whole_number_as_json_schema_says(
    client: TestClient, ingest_headers: dict[str, str], replicas: object, status: int
) -> None:
    """Before: 4.0 (an integer to JSON Schema, and how JavaScript writes 4) was a 422."""
    event = {"ts": 1_764_399_600, "service": "s", "kind": "replicas", "replicas": replicas}
    answer = client.post("/v1/events", json=event, headers=ingest_headers)
    assert answer.status_code == status, answer.text
    if status == 200:
        assert answer.json()["replicas"] == 4
