"""Request dependencies: the database session, bearer-token scopes, bounded bodies."""

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from service.db import get_session
from service.ingest import inflight
from service.ingest.body import BodyTooLarge, is_gzip
from service.services.tokens import Scope, TokenCache, allows, token_scope
from service.settings import Settings

# scope="function": the session commits before the response is sent.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]


# Dependencies that do no I/O are async: FastAPI runs a sync one on a worker thread,
# a hand-off and back per dependency per request.
async def get_app_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


SettingsDep = Annotated[Settings, Depends(get_app_settings)]

AUTH_COOKIE = "cachewatch_token"


def _presented_token(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, credentials = header.partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return request.cookies.get(AUTH_COOKIE)


def require_scope(needed: Scope) -> Callable[..., Awaitable[None]]:
    async def check(request: Request, settings: SettingsDep) -> None:
        if needed is Scope.READ and settings.public_read:
            return
        token = _presented_token(request)
        if token is None:
            raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
        token = token[:512]
        cache: TokenCache = request.app.state.token_cache
        factory: sessionmaker[Session] = request.app.state.sessionmaker
        granted = await cache.scope(token, lambda: run_in_threadpool(_stored_scope, factory, token))
        if granted is None:
            raise HTTPException(401, "unknown token", headers={"WWW-Authenticate": "Bearer"})
        if not allows(granted, needed):
            raise HTTPException(403, f"this token has the `{granted}` scope, not `{needed}`")

    return check


def _stored_scope(factory: sessionmaker[Session], token: str) -> Scope | None:
    """In a session of its own, ended at once: on SQLite its transaction holds the
    write lock (BEGIN IMMEDIATE), which the request's session would otherwise keep
    while the body is parsed and validated, serializing concurrent batches."""
    with factory() as session:
        return token_scope(session, token)


IngestAuth = Depends(require_scope(Scope.INGEST))
ReadAuth = Depends(require_scope(Scope.READ))


async def read_bounded_body(request: Request, settings: SettingsDep) -> AsyncIterator[bytes]:
    """The raw body, refused with 413 as soon as it passes the limit, so an
    oversized upload is never held in memory whole.

    Read under a reservation on the memory budget (`service.ingest.inflight`), held
    until the request ends: the body is charged as it arrives (all of a declared
    Content-Length at once, so a busy server answers 503 before the upload), and
    its decoding once read, unless it is gzip: that is charged as it inflates."""
    limit = settings.max_body_bytes
    declared = request.headers.get("content-length", "")
    expected = int(declared) if declared.isdigit() else 0
    if expected > limit:
        raise BodyTooLarge(f"body is over {limit} bytes")
    with inflight.reserving(_inflight_budget(request, settings)) as reservation:
        reservation.charge(expected)
        received = bytearray()
        async for chunk in request.stream():
            received += chunk
            if len(received) > limit:
                raise BodyTooLarge(f"body is over {limit} bytes")
            if len(received) > expected:  # chunked, no Content-Length
                reservation.charge(len(received) - expected)
                expected = len(received)
        body = bytes(received)
        del received
        if not is_gzip(body, request.headers.get("content-encoding")):
            inflight.charge_decoding(len(body))
        yield body


def _inflight_budget(request: Request, settings: Settings) -> inflight.Budget:
    """The app's budget, made for its first body: one per process under `serve`."""
    state = request.app.state
    budget: inflight.Budget | None = getattr(state, "inflight_budget", None)
    if budget is None:
        budget = state.inflight_budget = inflight.Budget(settings.max_inflight_bytes)
    return budget


BodyDep = Annotated[bytes, Depends(read_bounded_body)]
