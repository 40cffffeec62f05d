"""Tokens and bounds: only SHA-256 digests are stored and looked up (a digest
equality has no timing that depends on how much of a guess was right), each scope
opens exactly its endpoints, and every query parameter is bounded."""

import hashlib
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.models import ApiToken
from service.services import tokens as token_service
from service.services.tokens import Scope, token_scope


def sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def test_the_database_holds_digests_never_tokens(make_token: Any, session: Session) -> None:
    issued = {scope: make_token(scope) for scope in ("ingest", "read", "admin")}
    rows = session.scalars(select(ApiToken)).all()
    stored = {row.token_hash: row for row in rows}
    for scope, token in issued.items():
        assert stored[sha256(token)].scope == scope
        for row in rows:
            values = [str(getattr(row, c.name)) for c in ApiToken.__table__.columns]
            assert not any(token in value or token[3:] in value for value in values)


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The digests the token lookup asks the database for, in order."""
    asked: list[str] = []
    find = token_service.repository.find_token

    def spy(session: Session, token_hash: str) -> ApiToken | None:
        asked.append(token_hash)
        return find(session, token_hash)

    monkeypatch.setattr(token_service.repository, "find_token", spy)
    return asked


def test_tokens_are_looked_up_by_digest(
    make_token: Any, session: Session, asked: list[str]
) -> None:
    token = make_token("read")
    assert token_scope(session, token) is Scope.READ
    near_miss = token[:-1] + ("A" if token[-1] != "A" else "B")
    assert token_scope(session, near_miss) is None
    assert asked == [sha256(token), sha256(near_miss)]  # never the token itself


@pytest.mark.parametrize(("cache_s", "lookups"), [(5.0, 1), (0.0, 3)])
def test_ingest_looks_a_token_up_once_per_cache_period(
    app: FastAPI, make_token: Any, asked: list[str], cache_s: float, lookups: int
) -> None:
    app.state.token_cache = token_service.TokenCache(cache_s)
    headers = {"Authorization": f"Bearer {make_token('ingest')}"}
    with TestClient(app) as client:
        for i in range(3):
            body = f'{{"request_id": "tc-{i}", "ts": 1, "service": "s", "model": "m", '
            answer = client.post("/v1/usage", content=body + '"prompt_tokens": 1}', headers=headers)
            assert answer.status_code == 200 and answer.json()["accepted"] == 1
        # A wrong token is still refused, and asked each time.
        wrong = {"Authorization": "Bearer cw_not-a-token"}
        for _ in range(2):
            assert client.post("/v1/usage", content=b"{}", headers=wrong).status_code == 401
    assert len(asked) == lookups + 2


DASHBOARD_DATA = ["/dashboard/data/series", "/dashboard/data/capacity", "/dashboard/data/tables"]


def _authed_routes(app: FastAPI) -> list[tuple[str, str, Scope]]:
    """(method, path, scope needed) of every endpoint behind a token: the whole
    schema (so a new endpoint is covered without editing this test) and the
    dashboard's data requests. The rule: reads need `read`, writes `ingest`,
    running detection `admin`."""
    found = [("GET", path, Scope.READ) for path in DASHBOARD_DATA]
    for path, operations in app.openapi()["paths"].items():
        if path == "/healthz":
            continue
        for method in operations:
            if path == "/v1/detect":
                needed = Scope.ADMIN
            else:
                needed = Scope.INGEST if method == "post" else Scope.READ
            found.append((method.upper(), path, needed))
    return found


def test_every_scope_opens_exactly_its_endpoints(
    app: FastAPI, client: TestClient, make_token: Any
) -> None:
    routes = _authed_routes(app)
    paths = {path for _, path, _ in routes}
    assert {"/v1/usage", "/v1/events", "/v1/metrics", "/v1/detect", "/metrics"} <= paths
    assert any(p.startswith("/dashboard/data/") for p in paths)
    issued = {scope: make_token(scope.value) for scope in Scope}
    for method, path, needed in routes:
        for scope, token in issued.items():
            answer = client.request(
                method, path, headers={"Authorization": f"Bearer {token}"}, content=b"{}"
            )
            allowed = scope is needed or scope is Scope.ADMIN
            if allowed:
                assert answer.status_code not in (401, 403), (method, path, scope)
            else:
                assert answer.status_code == 403, (method, path, scope, answer.status_code)
        for headers in ({}, {"Authorization": "Bearer " + "x" * 100_000}):
            answer = client.request(method, path, headers=headers, content=b"{}")
            assert answer.status_code == 401, (method, path)


def test_every_query_parameter_is_bounded(app: FastAPI) -> None:
    for path, operations in app.openapi()["paths"].items():
        for method, operation in operations.items():
            for parameter in operation.get("parameters", []):
                options = parameter["schema"].get("anyOf", [parameter["schema"]])
                for option in options:
                    kind = option.get("type")
                    where = f"{method.upper()} {path} {parameter['name']}"
                    if kind == "string" and "enum" not in option:
                        assert "maxLength" in option, f"{where}: unbounded string"
                    if kind == "integer":
                        assert "maximum" in option, f"{where}: unbounded integer"


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/v1/events", {"limit": 10_001}),
        ("/v1/regressions", {"limit": 10_001}),
        ("/v1/alerts", {"limit": 10_001}),
        ("/v1/rejected", {"limit": 1001}),
        ("/v1/events", {"service": "s" * 101}),
        ("/v1/metrics", {"model": "m" * 201}),
        ("/v1/capacity", {"sizes": ",".join(["1"] * 65)}),
    ],
)
def test_oversized_parameters_are_refused(
    client: TestClient, read_headers: dict[str, str], path: str, params: dict[str, Any]
) -> None:
    assert client.get(path, params=params, headers=read_headers).status_code == 422
