"""The FastAPI application."""

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import cache
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.routing import Match, Route
from starlette.types import Scope

from service import worker
from service.api.errors import install_error_handlers
from service.api.routers import (
    alerts,
    dashboard,
    diagnoses,
    events,
    findings,
    groups,
    health,
    metrics,
    otlp,
    prometheus,
    regressions,
    rejected,
    sessions,
    usage,
)
from service.clickhouse import clickhouse_for, ids_for
from service.db import make_engine, make_sessionmaker
from service.ingest.array_memos import use_memo
from service.profiles import profiles_for
from service.services.tokens import TokenCache
from service.settings import Settings, get_settings


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    # A ClickHouse deployment's record ids: their salt leased now, not by the first
    # ingest request (on SQLite it would wait for its own write lock), and freed at
    # shutdown for the next process (service.clickhouse.ids).
    ids = ids_for(app.state.engine) if settings.clickhouse_url else None
    if ids is not None:
        ids.start()
    scheduler = (
        worker.start_background(app.state.sessionmaker, settings) if settings.run_jobs else None
    )
    _freeze_startup_heap()
    try:
        yield
    finally:
        if scheduler is not None:
            scheduler.shutdown(wait=False)
        if ids is not None:
            ids.release()
        app.state.engine.dispose()


@cache
def _freeze_startup_heap() -> None:
    """Move every object alive once the app has started (modules, routes, ORM and
    pydantic metadata) out of the garbage collector's reach. An ingest batch
    allocates thousands of short-lived containers; they promote into the oldest
    generation, and each full collection then walked the whole startup heap, which
    does not change. Once per process."""
    gc.collect()
    gc.freeze()


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    # No /docs or /redoc: FastAPI's pages load Swagger UI and ReDoc from a CDN, on the
    # origin of the dashboard's cookie, and no maintained PyPI package ships those
    # assets to serve them here instead. The schema itself stays at /openapi.json.
    app = FastAPI(
        title="cachewatch",
        version="0.1.0",
        lifespan=_lifespan,
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    # The models file is read first: a malformed one raises ModelsFileError (its
    # file and line) and the app does not start.
    app.state.profiles = profiles_for(settings)
    app.state.engine = make_engine(settings)
    app.state.sessionmaker = make_sessionmaker(app.state.engine, clickhouse_for(settings))
    app.state.token_cache = TokenCache(settings.token_cache_s)
    use_memo(settings.hash_memo_entries)
    install_error_handlers(app)
    app.add_exception_handler(405, _method_not_allowed)
    routers = [
        module.router
        for module in (
            usage,
            events,
            rejected,
            metrics,
            findings,
            diagnoses,
            groups,
            sessions,
            regressions,
            alerts,
            health,
            dashboard,
            prometheus,
            otlp,
        )
    ]
    for router in routers:
        app.include_router(router)
    # Flat, for the 405 answer: included routers are no plain list of routes.
    app.openapi = lambda: _openapi_without_null_parameters(app)  # type: ignore[method-assign]
    app.state.routes = [
        route
        for route in [*app.router.routes, *(r for router in routers for r in router.routes)]
        if isinstance(route, Route)
    ]
    return app


async def _method_not_allowed(request: Request, _: Exception) -> JSONResponse:
    """405 with an `Allow` that lists every method the path has. Starlette's own
    names only those of the first route matching the path, so `OPTIONS /v1/events`
    said `Allow: POST` although `GET /v1/events` exists. (A path no route matches is
    a 404 before this.)"""
    allowed = ", ".join(methods_of_path(request.app.state.routes, request.scope))
    return JSONResponse(
        {"detail": "Method Not Allowed"}, status_code=405, headers={"Allow": allowed}
    )


def methods_of_path(routes: list[Route], scope: Scope) -> list[str]:
    """The methods of every route whose path matches the request's, sorted."""
    methods: set[str] = set()
    for route in routes:
        if route.methods and route.matches(scope)[0] is not Match.NONE:
            methods |= route.methods
    return sorted(methods)


def _openapi_without_null_parameters(app: FastAPI) -> dict[str, Any]:
    """FastAPI's schema, less the `null` FastAPI gives every optional query and
    header parameter (from `str | None`): a query string or header has no null, only
    absent (`required: false`), and a client reading the null would send "null"."""
    if app.openapi_schema is None:
        schema = FastAPI.openapi(app)
        for operations in schema["paths"].values():
            for operation in operations.values():
                for parameter in operation.get("parameters", []):
                    parameter["schema"] = _without_null(parameter["schema"])
        app.openapi_schema = schema
    return app.openapi_schema


def _without_null(schema: dict[str, Any]) -> dict[str, Any]:
    options = [option for option in schema.get("anyOf", []) if option != {"type": "null"}]
    if len(options) != 1 or len(schema["anyOf"]) != 2:
        return schema
    merged = dict(options[0])
    for key, value in schema.items():
        if key == "anyOf":
            continue
        if key in merged and merged[key] != value:  # two patterns: both apply
            merged.setdefault("allOf", []).append({key: value})
        else:
            merged[key] = value
    return merged
