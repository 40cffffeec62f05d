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

from service.api.deps import AUTH_COOKIE, WRITES_NEED_BEARER
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
    schema, with the scope its `security` requirement names (so a new endpoint is
    covered without editing this test), and the dashboard's data requests."""
    found = [("GET", path, Scope.READ) for path in DASHBOARD_DATA]
    for path, operations in app.openapi()["paths"].items():
        for method, operation in operations.items():
            scopes = {
                scope
                for option in operation.get("security", [])
                for scope in option.get("bearer", [])
            }
            if scopes:
                (needed,) = scopes
                found.append((method.upper(), path, Scope(needed)))
    return found


def test_the_schema_names_the_scope_of_each_operation(app: FastAPI) -> None:
    """Reads need `read`, writes `ingest`, running detection `admin`; only the
    health check is open. Reads also take the dashboard's cookie, writes only the
    bearer header."""
    expected: dict[tuple[str, str], list[dict[str, list[str]]] | None] = {}
    for path, operations in app.openapi()["paths"].items():
        for method, operation in operations.items():
            if path == "/healthz":
                needed = None
            elif path == "/v1/detect":
                needed = [{"bearer": ["admin"]}]
            elif method == "post":
                needed = [{"bearer": ["ingest"]}]
            else:
                needed = [{"bearer": ["read"]}, {"cookie": ["read"]}]
            expected[(method, path)] = needed
            assert operation.get("security") == needed, (method, path)
    assert ("post", "/v1/usage") in expected and ("get", "/v1/metrics") in expected


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


WRITES = [("POST", "/v1/usage"), ("POST", "/v1/events"), ("POST", "/v1/detect")]


@pytest.mark.parametrize(("method", "path"), WRITES)
def test_the_dashboard_cookie_never_authorises_a_write(
    client: TestClient, make_token: Any, method: str, path: str
) -> None:
    """A cookie is sent by the browser on its own: a write it authorised could be
    posted by another page (as `text/plain`, which needs no CORS preflight). Even an
    admin token (accepted by `/login`) writes only from the bearer header."""
    token = make_token("admin")
    client.cookies.set(AUTH_COOKIE, token)
    for content_type in ("text/plain", "application/json"):
        answer = client.request(
            method,
            path,
            content=b'{"ts": 1, "service": "s", "kind": "note"}',
            headers={"Content-Type": content_type, "Origin": "https://evil.example"},
        )
        assert answer.status_code == 401, (path, content_type, answer.text)
        assert answer.json()["detail"] == WRITES_NEED_BEARER
        assert "Authorization: Bearer" in answer.json()["detail"]
    bearer = {"Authorization": f"Bearer {token}"}
    assert client.request(method, path, content=b"{}", headers=bearer).status_code != 401
    # Reads still take the cookie (the dashboard's own requests).
    assert client.get("/v1/metrics").status_code == 200
