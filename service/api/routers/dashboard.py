"""The dashboard (`GET /`), its data requests (`/dashboard/data/*`), the login page
and the static files (plotly.js from the installed plotly package: no CDN, works
offline).

Access: with `CACHEWATCH_PUBLIC_READ=true` everything is open; otherwise the page
wants a token with the read scope, entered once on `/login` and kept in an
HttpOnly, SameSite=Strict cookie, which `require_scope` accepts for reads only:
every write (`POST /v1/usage`, `/v1/events`, `/v1/detect`, OTLP) takes the bearer
header alone, so a page the user visits cannot post with their cookie. Without a
token the page redirects to `/login` and the data requests answer 401.

Cross-site requests: `POST /login` and `POST /logout` answer 403 to a request a
browser marks as coming from another origin, the rule of Go's
`net/http.CrossOriginProtection`: `Sec-Fetch-Site` when the browser sends it (every
current one does) must be `same-origin` (or `none`, a request the user made
directly); without it, an `Origin` must name this server (its `Host`, or
`CACHEWATCH_PUBLIC_URL`); a request with neither is not from a browser page (curl,
a script: nothing ambient to abuse) and passes. Why headers and not a CSRF token in
the form (a double-submit cookie): the browser sets these headers itself and a page
cannot forge them, so they protect the login form (where there is no session yet to
tie a token to) and the logout button alike with no server state, no extra cookie
and no token to thread through every page; a double-submit cookie is also open to a
sibling subdomain that writes cookies for the parent domain, which `Sec-Fetch-Site`
(`same-site`, refused) is not. The dashboard's own requests are same-origin GETs.

The page runs no inline script (a Content-Security-Policy says so), and every
user-supplied string is escaped by Jinja2 or written as text by the page script."""

import gzip
import threading
import time
from collections.abc import Callable
from functools import cache
from typing import Annotated, Any, TypeVar, cast
from urllib.parse import parse_qs, urlencode, urlsplit

import orjson
from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from sqlalchemy.orm import Session

from dashboards import data, groups, page
from dashboards.cache import ReplayCache, ResultCache
from dashboards.filters import FilterError, RawFilters, resolve
from service.api.deps import AUTH_COOKIE, BodyDep, ReadAuth, ReadSessionDep, SessionDep, SettingsDep
from service.api.freshness import CaughtUp
from service.services import dashboard
from service.services.tokens import Scope, allows, token_scope
from service.settings import Settings

router = APIRouter(tags=["dashboard"], include_in_schema=False)

COOKIE_MAX_AGE_S = 30 * 86_400
#: The longest value of each view parameter (a group's value as wide as the widest
#: group field of the record).
_LIMITS = {
    "service": 100,
    "model": 200,
    "group_by": 20,
    "group_value": 200,
    "from": 64,
    "to": 64,
    "bucket": 20,
    "range": 20,
    "groups": 20,
}
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data: blob:; connect-src 'self'; object-src 'none'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def raw_filters(request: Request) -> RawFilters:
    params = request.query_params
    for name, limit in _LIMITS.items():
        value = params.get(name, "")
        if len(value) > limit:
            raise FilterError(f"`{name}` is longer than {limit} characters")
        if "\x00" in value:  # as the API's parameters: no stored text holds one
            raise FilterError(f"`{name}` contains a NUL character")
    return RawFilters(
        service=params.get("service", ""),
        model=params.get("model", ""),
        from_=params.get("from", ""),
        to=params.get("to", ""),
        bucket=params.get("bucket", ""),
        range=params.get("range", ""),
        group_by=params.get("group_by", ""),
        group_value=params.get("group_value", ""),
        groups=params.get("groups", ""),
    )


def _presented_token(request: Request) -> str | None:
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return request.cookies.get(AUTH_COOKIE)


def _can_read(request: Request, session: Session, settings: Settings) -> bool:
    if settings.public_read:
        return True
    token = _presented_token(request)
    if token is None:
        return False
    granted = token_scope(session, token[:512])
    return granted is not None and allows(granted, Scope.READ)


def safe_next(value: str | None) -> str:
    """Only a path on this server: never an open redirect to another site."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return "/"
    if any(ord(ch) < 0x20 for ch in value) or len(value) > 2000:
        return "/"
    return value


def _html(body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(body, status_code=status, headers=PAGE_HEADERS)


@router.get("/", response_class=HTMLResponse)
def dashboard_page(request: Request, session: ReadSessionDep, settings: SettingsDep) -> Response:
    if not _can_read(request, session, settings):
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse("/login?" + urlencode({"next": target}), status_code=303)
    error = None
    try:
        filters = raw_filters(request)
        resolve(filters, None, 0)  # reject bad parameters here, not in three requests
    except FilterError as exc:
        filters, error = RawFilters(), str(exc)
    html = page.render_dashboard(
        filters=filters,
        series_keys=dashboard.series_keys(session),
        error=error,
        logged_in=AUTH_COOKIE in request.cookies,
        public_url=settings.public_url,
        refresh_s=max(30, settings.analytics_interval_s),
    )
    return _html(html, 400 if error else 200)


@router.get("/login", response_class=HTMLResponse)
def login_page(request: Request, settings: SettingsDep) -> Response:
    next_url = safe_next(request.query_params.get("next"))
    return _html(page.render_login(error=None, next_url=next_url, public_read=settings.public_read))


@router.post("/login", response_class=HTMLResponse)
def login(request: Request, body: BodyDep, session: SessionDep, settings: SettingsDep) -> Response:
    fields = parse_qs(body.data[:8192].decode("utf-8", "replace"), max_num_fields=10)
    next_url = safe_next((fields.get("next") or ["/"])[0])
    refusal = cross_origin_refusal(request, settings)
    if refusal is not None:
        html = page.render_login(error=refusal, next_url=next_url, public_read=settings.public_read)
        return _html(html, 403)
    token = (fields.get("token") or [""])[0].strip()
    granted = token_scope(session, token[:512]) if token else None
    if granted is None or not allows(granted, Scope.READ):
        error = (
            "Unknown or revoked token."
            if granted is None
            else f"This token has the `{granted}` scope; the dashboard needs `read` (or `admin`)."
        )
        html = page.render_login(error=error, next_url=next_url, public_read=settings.public_read)
        return _html(html, 401 if granted is None else 403)
    response = RedirectResponse(next_url, status_code=303)
    response.set_cookie(
        AUTH_COOKIE,
        token,
        max_age=COOKIE_MAX_AGE_S,
        path="/",
        httponly=True,
        samesite="strict",
        secure=_is_https(request),
    )
    return response


@router.post("/logout")
def logout(request: Request, settings: SettingsDep) -> Response:
    refusal = cross_origin_refusal(request, settings)
    if refusal is not None:
        return PlainTextResponse(refusal, status_code=403, headers=PAGE_HEADERS)
    response = RedirectResponse("/login", status_code=303)
    response.delete_cookie(
        AUTH_COOKIE, path="/", httponly=True, samesite="strict", secure=_is_https(request)
    )
    return response


#: `Sec-Fetch-Site` values of a request this server's own pages (or the user) made.
_OWN_FETCH_SITES = ("same-origin", "none")


def cross_origin_refusal(request: Request, settings: Settings) -> str | None:
    """Why a state-changing form POST is refused as cross-origin, or None to go on
    (the module docstring says why these headers and in this order)."""
    site = request.headers.get("sec-fetch-site")
    if site is not None:
        if site.lower() in _OWN_FETCH_SITES:
            return None
        return f"Refused: this form was posted from another site (Sec-Fetch-Site: {site[:20]})."
    origin = request.headers.get("origin")
    if origin is None or _is_own_origin(origin, request, settings):
        return None
    return f"Refused: this form was posted from another origin ({origin[:100]})."


def _is_own_origin(origin: str, request: Request, settings: Settings) -> bool:
    """`Origin` names this server: its host as the request reached it (the scheme is
    not compared: behind a TLS proxy the server sees http), or the public URL."""
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False  # "null" (a sandboxed frame, a privacy redirect) is no origin
    host = request.headers.get("host", "")
    public = urlsplit(settings.public_url)
    return parts.netloc.lower() == host.lower() or (
        (parts.scheme, parts.netloc.lower()) == (public.scheme, public.netloc.lower())
    )


def _is_https(request: Request) -> bool:
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return request.url.scheme == "https" or forwarded == "https"


# --- data requests -----------------------------------------------------------------


def _context(request: Request, session: Session) -> data.Context:
    try:
        return data.context(session, raw_filters(request), time.time_ns() // 1000)
    except FilterError as exc:
        raise HTTPException(422, str(exc)) from None


def json_response(request: Request, body: bytes, status: int = 200) -> Response:
    """Gzipped when the client takes it: figures are mostly numbers and shrink ~5x."""
    headers = {"Cache-Control": "no-store", "Vary": "Accept-Encoding"}
    if len(body) > 2048 and "gzip" in request.headers.get("accept-encoding", ""):
        body = gzip.compress(body, compresslevel=5)
        headers["Content-Encoding"] = "gzip"
    return Response(body, status_code=status, media_type="application/json", headers=headers)


def _encode(payload: Any) -> bytes:
    return orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY)


def _cached(
    request: Request, session: Session, panel: str, build: Callable[[], Any], *extra: Any
) -> Response:
    """The answer for this view and data version, computed once."""
    key = (panel, request.url.query, dashboard.data_version(session), *extra)
    results = _app_cache(request, "dashboard_results", ResultCache)
    body = results.get(key)
    if body is None:
        body = _encode(build())
        results.put(key, body)
    return json_response(request, body)


@router.get("/dashboard/data/series", dependencies=[ReadAuth, CaughtUp])
def series_data(request: Request, session: ReadSessionDep) -> Response:
    """Headline numbers and the hit-rate, rewarms, TTFT and replicas figures."""
    return _cached(
        request,
        session,
        "series",
        lambda: data.series_payload(session, _context(request, session)),
    )


@router.get("/dashboard/data/capacity", dependencies=[ReadAuth, CaughtUp])
def capacity_data(
    request: Request,
    session: ReadSessionDep,
    sample: Annotated[int | None, Query(ge=0, le=2**63 - 1)] = None,
) -> Response:
    """The capacity figure; `{"pending": true, "sample": id}` (202) while its replay
    runs, to be asked again with `sample=id`."""
    replays = _app_cache(request, "dashboard_replays", ReplayCache)
    payload = data.capacity_payload(session, _context(request, session), replays, sample=sample)
    return json_response(request, _encode(payload), 202 if payload["pending"] else 200)


@router.get("/dashboard/data/tables", dependencies=[ReadAuth, CaughtUp])
def tables_data(request: Request, session: ReadSessionDep, settings: SettingsDep) -> Response:
    """The regressions (with their alert state) and the top prefixes."""
    return _cached(
        request,
        session,
        "tables",
        lambda: data.tables_payload(session, settings, _context(request, session)),
        dashboard.alerts_version(session),
    )


@router.get("/dashboard/data/findings", dependencies=[ReadAuth, CaughtUp])
def findings_data(request: Request, session: ReadSessionDep, settings: SettingsDep) -> Response:
    """The findings of the view (contract section 5b), worst first, or what the
    range's records lack for them. Its own request: the other panels never wait
    for it."""
    return _cached(
        request,
        session,
        "findings",
        lambda: data.findings_payload(session, settings, _context(request, session)),
    )


@router.get("/dashboard/data/groups", dependencies=[ReadAuth, CaughtUp])
def groups_data(request: Request, session: ReadSessionDep) -> Response:
    """The groups table (one row per value of the view's `groups` field, as
    `GET /v1/groups` answers, each with a sparkline) and, when two or more deploy
    tags served the range, their hit rates side by side (the canary panel)."""
    return _cached(
        request,
        session,
        "groups",
        lambda: groups.groups_payload(session, _context(request, session)),
    )


_CACHE_LOCK = threading.Lock()
T = TypeVar("T")


def _app_cache(request: Request, name: str, kind: Callable[[], T]) -> T:
    # One per app: tests build many apps over rolled-back data; never share answers.
    with _CACHE_LOCK:
        cache_ = getattr(request.app.state, name, None)
        if cache_ is None:
            cache_ = kind()
            setattr(request.app.state, name, cache_)
        return cast(T, cache_)


# --- static files --------------------------------------------------------------------


@router.get("/docs/{name}")
def doc_file(name: str) -> Response:
    """A doc the page links to, as plain text (Markdown reads as it is)."""
    if name not in page.DOCS:
        raise HTTPException(404, "no such doc")
    path = page.DOCS_DIR / name
    if not path.is_file():
        raise HTTPException(
            404, f"this server was installed without its docs: read docs/{name} in cachewatch"
        )
    return PlainTextResponse(
        path.read_text(encoding="utf-8"),
        headers={"X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache"},
    )


@cache
def _static_bytes(name: str) -> tuple[bytes, bytes, str]:
    path, media_type = page.STATIC_FILES[name]
    raw = path.read_bytes()
    return raw, gzip.compress(raw, compresslevel=9), media_type


@router.get("/static/{name}")
def static_file(name: str, request: Request, v: str | None = None) -> Response:
    if name not in page.STATIC_FILES:
        raise HTTPException(404, "no such file")
    raw, packed, media_type = _static_bytes(name)
    # Versioned URLs (the page always uses them) never change: cache for a year.
    headers = {
        "Cache-Control": "public, max-age=31536000, immutable" if v else "no-cache",
        "Vary": "Accept-Encoding",
        "X-Content-Type-Options": "nosniff",
    }
    if "gzip" in request.headers.get("accept-encoding", ""):
        headers["Content-Encoding"] = "gzip"
        return Response(packed, media_type=media_type, headers=headers)
    return Response(raw, media_type=media_type, headers=headers)
