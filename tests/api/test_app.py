"""The application's start-up."""

import gc

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.api import app as app_module


def test_startup_moves_the_heap_out_of_the_collectors_reach(
    app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Full collections would otherwise walk every module, route and ORM object on
    each ingest burst. The freeze runs once per process, so the lifespan's call is
    counted, and the real function is checked on its own from an unfrozen heap."""
    freeze = app_module._freeze_startup_heap
    calls: list[None] = []
    monkeypatch.setattr(app_module, "_freeze_startup_heap", lambda: calls.append(None))
    with TestClient(app):
        assert calls == [None]
    gc.unfreeze()  # an earlier test may have frozen the heap: start from none
    assert gc.get_freeze_count() == 0
    freeze.__wrapped__()  # the real one, past its once-per-process cache
    assert gc.get_freeze_count() > 10_000


# Every path of the app with its methods, written out: the schema's operations and
# the routes outside it (dashboard, login, static files, the schema itself).
PATH_METHODS = {
    "/v1/usage": {"POST"},
    "/v1/events": {"GET", "POST"},
    "/v1/rejected": {"GET"},
    "/v1/metrics": {"GET"},
    "/v1/capacity": {"GET"},
    "/v1/findings": {"GET"},
    "/v1/diagnoses": {"GET"},
    "/v1/groups": {"GET"},
    "/v1/sessions": {"GET"},
    "/v1/regressions": {"GET"},
    "/v1/detect": {"POST"},
    "/v1/alerts": {"GET"},
    "/v1/otlp/v1/traces": {"POST"},
    "/v1/otlp/v1/logs": {"POST"},
    "/v1/traces": {"POST"},
    "/v1/logs": {"POST"},
    "/healthz": {"GET"},
    "/metrics": {"GET"},
    "/": {"GET"},
    "/login": {"GET", "POST"},
    "/logout": {"POST"},
    "/dashboard/data/series": {"GET"},
    "/dashboard/data/groups": {"GET"},
    "/static/plotly.min.js": {"GET"},
    "/openapi.json": {"GET", "HEAD"},
}
METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "QUERY"]


def test_the_table_above_is_every_operation_of_the_schema(app: FastAPI) -> None:
    declared = {
        path: {method.upper() for method in operations}
        for path, operations in app.openapi()["paths"].items()
    }
    assert declared == {path: PATH_METHODS[path] for path in declared}


@pytest.mark.parametrize("path", sorted(PATH_METHODS))
def test_an_undeclared_method_is_405_with_every_method_of_the_path(
    client: TestClient, path: str
) -> None:
    """Starlette named only the first route matching the path (`OPTIONS /v1/events`
    said `Allow: POST`); schemathesis' unsupported_method check and clients read it."""
    for method in METHODS:
        if method in PATH_METHODS[path]:
            continue
        answer = client.request(method, path)
        assert answer.status_code == 405, (method, path)
        allowed = {m.strip() for m in answer.headers["allow"].split(",")}
        assert allowed == PATH_METHODS[path], (method, path, allowed)


@pytest.mark.parametrize("method", METHODS)
def test_a_path_that_does_not_exist_is_404_whatever_the_method(
    client: TestClient, method: str
) -> None:
    for path in ("/nope", "/v1/usage/x", "/v1", "/dashboard/data/nope"):
        assert client.request(method, path).status_code == 404, (method, path)


def test_no_api_browser_pages_only_the_schema(client: TestClient) -> None:
    """FastAPI's /docs and /redoc load Swagger UI and ReDoc from a CDN (on the
    origin of the dashboard's cookie, without a Content-Security-Policy): gone."""
    for path in ("/docs", "/redoc", "/docs/oauth2-redirect"):
        assert client.get(path).status_code == 404, path
    schema = client.get("/openapi.json")
    assert schema.status_code == 200 and schema.json()["info"]["title"] == "cachewatch"
