"""The memory budget of request bodies (service/ingest/inflight.py) on every route
that reads a body: past it 503 with Retry-After and the usual error shape, nothing
stored, and the same request goes through once the budget is free again."""

import gzip

import orjson
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.ingest import inflight
from service.models import RejectedRecord, UsageRecord

MiB = 1024 * 1024
CAPACITY = 64 * MiB

RECORD = {"request_id": "r-1", "ts": 1_714_564_800, "service": "s", "model": "m"}
BODIES = {  # a body each route takes, over 200 KB so that its charge is over 2 MiB
    "/v1/usage": b"\n".join(
        orjson.dumps({**RECORD, "request_id": f"r-{i}", "prompt_tokens": 1}) for i in range(3000)
    ),
    "/v1/events": orjson.dumps(
        [
            {"ts": 1_714_564_800, "service": "s", "kind": "note", "description": f"{i}" * 200}
            for i in range(1000)
        ]
    ),
    "/v1/otlp/v1/traces": orjson.dumps({"resourceSpans": [], "padding": "x" * 200_000}),
    "/login": b"token=nope&next=/&padding=" + b"x" * 200_000,
}
HEADERS = {"/v1/otlp/v1/traces": {"Content-Type": "application/json"}}


@pytest.fixture
def budget(app: FastAPI) -> inflight.Budget:
    budget = inflight.Budget(CAPACITY)
    app.state.inflight_budget = budget
    return budget


def stored(session: Session) -> tuple[int, int]:
    return (
        session.scalar(select(func.count()).select_from(UsageRecord)) or 0,
        session.scalar(select(func.count()).select_from(RejectedRecord)) or 0,
    )


@pytest.mark.parametrize("path", list(BODIES))
def test_every_body_route_is_503_while_the_budget_is_spent_then_goes_through(
    client: TestClient,
    ingest_headers: dict[str, str],
    session: Session,
    budget: inflight.Budget,
    path: str,
) -> None:
    others = inflight.Reservation(budget)
    others.charge(CAPACITY - 2 * MiB)  # bodies of other requests hold all but 2 MiB
    headers = {**ingest_headers, **HEADERS.get(path, {})}

    busy = client.post(path, content=BODIES[path], headers=headers)
    assert busy.status_code == 503, busy.text
    assert busy.headers["Retry-After"] == "5"
    assert "retry later" in busy.json()["error"]
    assert stored(session) == (0, 0)
    assert budget.held == CAPACITY - 2 * MiB  # what the refused one took is given back

    others.release()
    again = client.post(path, content=BODIES[path], headers=headers)
    assert again.status_code in (200, 401), again.text  # /login: the token is unknown
    assert budget.held == 0


def test_a_gzip_body_is_charged_its_inflated_size_before_it_is_kept(
    client: TestClient, ingest_headers: dict[str, str], session: Session, budget: inflight.Budget
) -> None:
    """As sent it is tiny; inflated it is 2.2 MiB, charged 11 times: 24 MiB of 64."""
    body = gzip.compress(b"\n".join([orjson.dumps({**RECORD, "prompt_tokens": 1})] * 30_000))
    headers = {**ingest_headers, "Content-Encoding": "gzip"}
    others = inflight.Reservation(budget)
    others.charge(CAPACITY - 16 * MiB)
    assert client.post("/v1/usage", content=body, headers=headers).status_code == 503
    others.release()
    answer = client.post("/v1/usage", content=body, headers=headers)
    assert answer.json()["accepted"] == 1 and answer.json()["duplicates"] == 29_999
    assert stored(session) == (1, 0) and budget.held == 0


def test_a_body_that_alone_passes_the_budget_is_413(
    client: TestClient, ingest_headers: dict[str, str], session: Session, budget: inflight.Budget
) -> None:
    """JSON dense in separators takes up to 40 bytes a byte: 2 MiB of `[]` elements
    is charged about 80 MiB, over the whole budget, so no retry would help."""
    body = b"[" + b"[]," * (2 * MiB // 3) + b"[]]"
    answer = client.post("/v1/usage", content=body, headers=ingest_headers)
    assert answer.status_code == 413, answer.text
    assert "CACHEWATCH_MAX_INFLIGHT_BYTES" in answer.json()["error"]
    assert stored(session) == (0, 0) and budget.held == 0
