"""GET /v1/sessions (docs/groups.md "Sessions"): conversations most spend first, with
their hit rate, dollars and unread cache writes as computed by hand; filters, pages
and bad parameters."""

from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from service.api.app import create_app
from service.settings import Settings

T0 = 1_764_399_600  # 2025-11-29T07:00:00Z
MODELS = """
[[model]]
match = "agent-model"
provider = "anthropic"
ttl_s = 300
input_usd_per_mtok = 3.0
cached_usd_per_mtok = 0.3
write_usd_per_mtok = 3.75
"""


@pytest.fixture
def priced(tmp_path: Path, settings: Settings, session_factory: sessionmaker[Session]) -> FastAPI:
    models = tmp_path / "models.toml"
    models.write_text(MODELS, encoding="utf-8")
    app = create_app(settings.model_copy(update={"models_file": models}))
    app.state.sessionmaker = session_factory
    return app


def call(
    i: int, session: str | None, at: int, tokens: tuple[int, int, int], **extra: Any
) -> dict[str, Any]:
    prompt, cached, written = tokens
    return {
        "request_id": f"c{i}",
        "ts": at,
        "service": "agents",
        "model": "agent-model",
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "cache_write_tokens": written,
        "session_id": session,
        **extra,
    }


RECORDS = [
    call(1, "A", T0, (10_000, 0, 10_000), tenant="alice"),
    call(2, "A", T0 + 60, (11_000, 10_000, 1_000), tenant="alice"),
    call(3, "A", T0 + 660, (12_000, 0, 12_000), tenant="alice"),  # after a 10-minute pause
    call(4, "B", T0 + 30, (100, 0, 0), tenant="bob"),
    call(5, None, T0 + 40, (5_000, 0, 5_000)),  # no session: not listed
]


def test_sessions_as_computed_by_hand(
    priced: FastAPI, ingest_headers: dict[str, str], read_headers: dict[str, str]
) -> None:
    with TestClient(priced) as client:
        assert (
            client.post("/v1/usage", json=RECORDS, headers=ingest_headers).json()["accepted"] == 5
        )
        answer = client.get("/v1/sessions", headers=read_headers)
    assert answer.status_code == 200 and answer.headers["x-total-count"] == "2"
    a, b = answer.json()
    # Spend per call (prices per million): 10,000 written at 3.75; 1,000 written at
    # 3.75 and 10,000 read at 0.30; 12,000 written at 3.75.
    spend = (10_000 * 3.75 + 1_000 * 3.75 + 10_000 * 0.3 + 12_000 * 3.75) / 1e6
    # Unread: the second call's 1,000 (the next call came 600 s later, past the
    # 300 s TTL) and the last call's 12,000 (none came after it).
    assert a == {
        "session_id": "A",
        "service": "agents",
        "models": ["agent-model"],
        "tenant": "alice",
        "requests": 3,
        "first_ts": "2025-11-29T07:00:00Z",
        "last_ts": "2025-11-29T07:11:00Z",
        "prompt_tokens": 33_000,
        "cached_tokens": 10_000,
        "hit_rate": pytest.approx(10_000 / 33_000),
        "cache_write_tokens": 23_000,
        "unread_write_tokens": 13_000,
        "spend_usd": pytest.approx(spend),
        "unread_write_usd": pytest.approx(13_000 * (3.75 - 3.0) / 1e6),
    }
    assert (b["session_id"], b["spend_usd"], b["unread_write_tokens"]) == (
        "B",
        pytest.approx(100 * 3.0 / 1e6),
        0,
    )


def test_filters_and_pages(
    priced: FastAPI, ingest_headers: dict[str, str], read_headers: dict[str, str]
) -> None:
    with TestClient(priced) as client:
        client.post("/v1/usage", json=RECORDS, headers=ingest_headers)
        bob = client.get("/v1/sessions?tenant=bob", headers=read_headers).json()
        assert [s["session_id"] for s in bob] == ["B"]
        early = client.get(f"/v1/sessions?to={T0 + 61}", headers=read_headers).json()
        assert [(s["session_id"], s["requests"]) for s in early] == [("A", 2), ("B", 1)]
        # Within the range the second call is the last: its write counts as unread.
        assert early[0]["unread_write_tokens"] == 1_000
        first = client.get("/v1/sessions?limit=1", headers=read_headers)
        assert [s["session_id"] for s in first.json()] == ["A"]
        assert 'rel="next"' in first.headers["link"] and "offset=1" in first.headers["link"]
        assert client.get("/v1/sessions?service=other", headers=read_headers).json() == []
        assert client.get("/v1/sessions?limit=0", headers=read_headers).status_code == 422
        assert client.get("/v1/sessions?from=yesterday", headers=read_headers).status_code == 422
        assert client.get("/v1/sessions").status_code == 401
