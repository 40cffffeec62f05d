from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.models import RejectedRecord

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
