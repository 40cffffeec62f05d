"""Exceptions mapped to answers. The database being down or locked (the relational
one, or the ClickHouse holding a deployment's records), or request bodies holding
the whole memory budget, is a 503 with Retry-After (the shipper retries), never a
500."""

import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from service.clickhouse.client import ClickHouseUnavailable
from service.ingest.body import BodyTooLarge
from service.ingest.inflight import Busy

log = logging.getLogger(__name__)


# SQLite reports a missing table and a held lock with the same exception class;
# only these mean "try again later". PostgreSQL's OperationalError is always about
# the connection or the server's state.
_SQLITE_TRANSIENT = ("locked", "busy", "unable to open", "disk i/o", "readonly", "full")


def is_unavailable(exc: Exception) -> bool:
    if isinstance(exc, PoolTimeoutError | InterfaceError):
        return True
    message = str(getattr(exc, "orig", exc)).lower()
    module = type(getattr(exc, "orig", exc)).__module__
    if module.startswith("sqlite3"):
        return any(word in message for word in _SQLITE_TRANSIENT)
    return True


def install_error_handlers(app: FastAPI) -> None:
    retry_after = str(app.state.settings.retry_after_s)

    def unavailable(reason: str) -> JSONResponse:
        return JSONResponse(
            {"error": f"database unavailable: {reason}; retry later"},
            status_code=503,
            headers={"Retry-After": retry_after},
        )

    @app.exception_handler(BodyTooLarge)
    async def too_large(_: Request, exc: BodyTooLarge) -> JSONResponse:
        return JSONResponse({"error": str(exc)}, status_code=413)

    @app.exception_handler(Busy)
    async def busy(_: Request, exc: Busy) -> JSONResponse:
        return JSONResponse(
            {"error": str(exc)}, status_code=503, headers={"Retry-After": retry_after}
        )

    @app.exception_handler(OperationalError)
    @app.exception_handler(InterfaceError)
    @app.exception_handler(PoolTimeoutError)
    async def database_down(_: Request, exc: Exception) -> JSONResponse:
        if not is_unavailable(exc):
            log.error("database error", exc_info=exc)
            return JSONResponse({"error": "database error"}, status_code=500)
        log.warning("database unavailable: %s", exc)
        return unavailable(type(exc).__name__)

    @app.exception_handler(ClickHouseUnavailable)
    async def clickhouse_down(_: Request, exc: ClickHouseUnavailable) -> JSONResponse:
        log.warning("ClickHouse unavailable: %s", exc)
        return unavailable(f"ClickHouse {exc.reason}")

    @app.exception_handler(DBAPIError)
    async def database_error(_: Request, exc: DBAPIError) -> JSONResponse:
        if exc.connection_invalidated:
            return unavailable("connection lost")
        log.exception("database error")
        return JSONResponse({"error": "database error"}, status_code=500)
