"""Request dependencies: the database session, token scopes, bounded bodies."""

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, HTTPException, Request, Security
from fastapi.security import APIKeyCookie, HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from service.db import get_read_session, get_session, read_sessionmaker
from service.ingest import inflight
from service.ingest.body import BodyTooLarge, is_gzip
from service.services.tokens import Scope, TokenCache, allows, token_scope
from service.settings import Settings

# scope="function": the session commits before the response is sent.
SessionDep = Annotated[Session, Depends(get_session, scope="function")]
# The session of a route that only reads: on SQLite it takes no lock (`reading_only`).
ReadSessionDep = Annotated[Session, Depends(get_read_session, scope="function")]


# Dependencies that do no I/O are async: FastAPI runs a sync one on a worker thread,
# a hand-off and back per dependency per request.
async def get_app_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


SettingsDep = Annotated[Settings, Depends(get_app_settings)]

AUTH_COOKIE = "cachewatch_token"

# Declared as security schemes, so the OpenAPI schema says how each operation is
# authorised: writes by the bearer header alone, reads by it or the dashboard's cookie.
_BEARER = HTTPBearer(
    scheme_name="bearer",
    auto_error=False,
    description="A token from `cachewatch token create`; the only credential for writes.",
)
_COOKIE = APIKeyCookie(
    name=AUTH_COOKIE,
    scheme_name="cookie",
    auto_error=False,
    description="The dashboard's login cookie (`POST /login`): authorises reads only.",
)
BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(_BEARER)]
CookieDep = Annotated[str | None, Depends(_COOKIE)]

WRITES_NEED_BEARER = (
    "writes need the `Authorization: Bearer <token>` header: "
    "the dashboard's login cookie authorises reads only"
)


def require_scope(needed: Scope) -> Callable[..., Awaitable[None]]:
    """The dependency that checks a token for `needed`. Reads take the bearer header
    or the dashboard's cookie; writes (`ingest`, `admin`) only the header. A cookie
    is sent by the browser on its own, so a cookie that authorised a write would let
    any page the user visits post on their behalf (a same-site page even past
    SameSite=Strict, and a `text/plain` POST needs no CORS preflight); a header has
    to be set by code that holds the token."""
    if needed is Scope.READ:

        async def check_read(
            request: Request, settings: SettingsDep, bearer: BearerDep, cookie: CookieDep
        ) -> None:
            if settings.public_read:
                return
            token = bearer.credentials if bearer is not None else cookie
            if token is None:
                raise _unauthorised("missing bearer token")
            await _check_token(request, token, needed)

        return check_read

    async def check_write(request: Request, bearer: BearerDep) -> None:
        if bearer is None:
            cookie_only = AUTH_COOKIE in request.cookies
            raise _unauthorised(WRITES_NEED_BEARER if cookie_only else "missing bearer token")
        await _check_token(request, bearer.credentials, needed)

    return check_write


def _unauthorised(message: str) -> HTTPException:
    return HTTPException(401, message, headers={"WWW-Authenticate": "Bearer"})


async def _check_token(request: Request, token: str, needed: Scope) -> None:
    token = token[:512]
    cache: TokenCache = request.app.state.token_cache
    factory = read_sessionmaker(request.app.state)
    granted = await cache.scope(token, lambda: run_in_threadpool(_stored_scope, factory, token))
    if granted is None:
        raise _unauthorised("unknown token")
    if not allows(granted, needed):
        raise HTTPException(403, f"this token has the `{granted}` scope, not `{needed}`")


def _stored_scope(factory: sessionmaker[Session], token: str) -> Scope | None:
    """In a read-only session of its own, ended at once: a lookup in the request's
    session would begin its transaction early, and on SQLite (BEGIN IMMEDIATE) hold
    the write lock while the body is parsed and validated."""
    with factory() as session:
        return token_scope(session, token)


def scope_auth(needed: Scope) -> Any:
    """`dependencies=[...]` entry of an operation that needs `needed`; the scope is
    named in the operation's OpenAPI `security` requirement."""
    return Security(require_scope(needed), scopes=[needed.value])


IngestAuth = scope_auth(Scope.INGEST)
ReadAuth = scope_auth(Scope.READ)
AdminAuth = scope_auth(Scope.ADMIN)


@dataclass(frozen=True)
class ReceivedBody:
    """A request's raw body and its reservation on the memory budget, which the
    service that decodes the body charges as it goes."""

    data: bytes
    reservation: inflight.Reservation


async def read_bounded_body(request: Request, settings: SettingsDep) -> AsyncIterator[ReceivedBody]:
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
            reservation.charge_decoding(len(body))
        yield ReceivedBody(body, reservation)


def _inflight_budget(request: Request, settings: Settings) -> inflight.Budget:
    """The app's budget, made for its first body: one per process under `serve`."""
    state = request.app.state
    budget: inflight.Budget | None = getattr(state, "inflight_budget", None)
    if budget is None:
        budget = state.inflight_budget = inflight.Budget(settings.max_inflight_bytes)
    return budget


BodyDep = Annotated[ReceivedBody, Depends(read_bounded_body)]
