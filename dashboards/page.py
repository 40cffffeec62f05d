"""The HTML pages: the dashboard shell and the login page, Jinja2 templates with
autoescaping on (every user-supplied string is escaped by the template engine; the
data the page fetches is written into the DOM as text by `static/dashboard.js`)."""

import hashlib
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import plotly
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from dashboards.filters import FilterError, RawFilters, parse_group, parse_groups_by
from service.rollups.chart import GROUP_BYS, Group

HERE = Path(__file__).resolve().parent
STATIC_DIR = HERE / "static"
PLOTLY_JS = Path(plotly.__file__).resolve().parent / "package_data" / "plotly.min.js"
STATIC_FILES = {
    "dashboard.js": (STATIC_DIR / "dashboard.js", "text/javascript; charset=utf-8"),
    "dashboard.css": (STATIC_DIR / "dashboard.css", "text/css; charset=utf-8"),
    "plotly.min.js": (PLOTLY_JS, "text/javascript; charset=utf-8"),
}
#: The docs the page links to, served as text from the repository's docs/ (a server
#: installed without them answers 404 naming the file to read instead).
DOCS_DIR = HERE.parent / "docs"
DOCS = ("fingerprint.md", "findings.md")
RANGES: tuple[tuple[str, str], ...] = (
    ("1h", "last hour"),
    ("6h", "6 hours"),
    ("24h", "24 hours"),
    ("7d", "7 days"),
    ("30d", "30 days"),
)
BUCKETS = ("", "1m", "5m", "15m", "1h", "6h", "1d")

_env = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(["html"], default_for_string=True, default=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


@cache
def static_version(name: str) -> str:
    """A content hash for cache-busting URLs (files are served as immutable)."""
    path, _ = STATIC_FILES[name]
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def static_url(name: str) -> str:
    return f"/static/{name}?v={static_version(name)}"


_env.globals["static_url"] = static_url


def _group_of(filters: RawFilters) -> tuple[Group | None, str]:
    """The selected group and the groups table's field (defaults for parameters the
    page refused: it then renders without them)."""
    try:
        return parse_group(filters), parse_groups_by(filters)
    except FilterError:
        return None, GROUP_BYS[0]


def _query_without(filters: RawFilters, *names: str, **changes: str) -> str:
    """The view's query string without `names`, with `changes` set."""
    query = {k: v for k, v in filters.query().items() if k not in names}
    return urlencode({**query, **changes})


def render_dashboard(
    *,
    filters: RawFilters,
    series_keys: Sequence[tuple[str, str]],
    error: str | None,
    logged_in: bool,
    public_url: str,
    refresh_s: int,
) -> str:
    services = sorted({s for s, _ in series_keys})
    models = sorted({m for s, m in series_keys if not filters.service or s == filters.service})
    group, groups_by = _group_of(filters)
    context: dict[str, Any] = {
        "filters": filters,
        "services": services,
        "models": models,
        "ranges": RANGES,
        "buckets": BUCKETS,
        "has_data": bool(series_keys),
        "error": error,
        "logged_in": logged_in,
        "query": urlencode(filters.query()),
        "query_no_dates": urlencode(
            {k: v for k, v in filters.query().items() if k not in ("from", "to")}
        ),
        "public_url": public_url.rstrip("/"),
        "refresh_s": refresh_s,
        "custom_range": bool(filters.from_ or filters.to),
        "group": group,
        "group_bys": GROUP_BYS,
        "groups_by": groups_by,
        "query_no_group": _query_without(filters, "group_by", "group_value"),
        "group_tabs": [(by, _query_without(filters, "groups", groups=by)) for by in GROUP_BYS],
        "scope": scope_words(filters.service or None, filters.model or None),
    }
    return _env.get_template("dashboard.html").render(context)


def scope_words(service: str | None, model: str | None) -> str:
    """`assistant · acme-70b`, `assistant · all models`, `all services`."""
    if service is None and model is None:
        return "all services"
    return f"{service or 'all services'} · {model or 'all models'}"


def render_login(*, error: str | None, next_url: str, public_read: bool) -> str:
    return _env.get_template("login.html").render(
        error=error, next_url=next_url, public_read=public_read
    )
