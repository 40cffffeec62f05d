"""The FastAPI application."""

import gc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import cache

from fastapi import FastAPI

from service import worker
from service.api.errors import install_error_handlers
from service.api.routers import (
    alerts,
    dashboard,
    events,
    health,
    metrics,
    otlp,
    prometheus,
    regressions,
    rejected,
    usage,
)
from service.db import make_engine, make_sessionmaker
from service.services.tokens import TokenCache
from service.settings import Settings, get_settings


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    settings: Settings = app.state.settings
    scheduler = (
        worker.start_background(app.state.sessionmaker, settings) if settings.run_jobs else None
    )
    _freeze_startup_heap()
    try:
        yield
    finally:
        if scheduler is not None:
            scheduler.shutdown(wait=False)
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
    app = FastAPI(title="cachewatch", version="0.1.0", lifespan=_lifespan)
    app.state.settings = settings
    app.state.engine = make_engine(settings)
    app.state.sessionmaker = make_sessionmaker(app.state.engine)
    app.state.token_cache = TokenCache(settings.token_cache_s)
    install_error_handlers(app)
    for module in (usage, events, rejected, metrics, regressions, alerts, health):
        app.include_router(module.router)
    app.include_router(dashboard.router)
    app.include_router(prometheus.router)
    app.include_router(otlp.router)
    return app
