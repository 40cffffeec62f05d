"""The FastAPI application."""

from fastapi import FastAPI

from service.api.errors import install_error_handlers
from service.api.routers import events, health, rejected, usage
from service.db import make_engine, make_sessionmaker
from service.settings import Settings, get_settings


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    app = FastAPI(title="cachewatch", version="0.1.0")
    app.state.settings = settings
    app.state.engine = make_engine(settings)
    app.state.sessionmaker = make_sessionmaker(app.state.engine)
    install_error_handlers(app)
    for module in (usage, events, rejected, health):
        app.include_router(module.router)
    return app
