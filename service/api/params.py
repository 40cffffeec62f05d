"""Query parameters shared by the read endpoints."""

from typing import Annotated, Any

from fastapi import Header, HTTPException, Query, Request, Response

from service.api.schemas import CONTENT_ENCODING_PATTERN, NO_NUL, TS_SCHEMA, TS_TEXT_PATTERN
from service.ingest.timestamps import parse_ts_text
from service.rollups.chart import Group
from service.services.paging import Page, Paged
from service.settings import READ_PAGE_CEILING, Settings


# No stored text holds a NUL (PostgreSQL refuses one), so a parameter with one can
# match nothing: refused by validation (422) instead of failing inside the query.
def _text(max_length: int) -> Any:
    return Query(max_length=max_length, pattern=NO_NUL)


def declared_pattern(pattern: str, description: str, **query: Any) -> Any:
    """A parameter whose OpenAPI schema carries `pattern`, enforced not by FastAPI
    (its 422 would quote the whole pattern) but by the router's parser, whose
    message says what is expected; tests/api/test_patterns.py checks that the two
    accept the same strings."""
    return Query(description=description, json_schema_extra={"pattern": pattern}, **query)


def _time(alias: str | None = None) -> Any:
    return declared_pattern(
        TS_TEXT_PATTERN,
        f"{TS_SCHEMA['description']} (in decimal digits); empty: no bound",
        alias=alias,
        max_length=64,
    )


ServiceParam = Annotated[str | None, _text(100)]
# The group filters (contract sections 4b and 6), as wide as the record's fields.
ScenarioParam = Annotated[str | None, _text(100)]
TenantParam = Annotated[str | None, _text(200)]
DeployParam = Annotated[str | None, _text(200)]
ModelParam = Annotated[str | None, _text(200)]
# `from` is a Python keyword, hence the alias.
TimeParam = Annotated[str | None, _time(alias="from")]
ToParam = Annotated[str | None, _time()]


def parse_time_param(name: str, value: str | None) -> int | None:
    """`from`/`to` take the same forms as `ts`: RFC 3339 or an epoch number."""
    if value is None or value == "":
        return None
    try:
        return parse_ts_text(value)
    except ValueError as exc:
        raise HTTPException(422, f"`{name}`: {exc}") from None


#: `Content-Encoding` of a raw body (POST /v1/usage, OTLP): anything else is a 400
#: from the body's decoding, which keeps the body in the rejected store.
ContentEncodingHeader = Header(
    max_length=100,
    description="gzip (or x-gzip: the body is gzipped), identity or none",
    json_schema_extra={"pattern": CONTENT_ENCODING_PATTERN},
)


def group_filter(scenario: str | None, tenant: str | None, deploy: str | None) -> Group | None:
    """The one group a read is filtered to (empty values are no filter). Groups are
    kept per field, not per combination: two at once name a series that is not kept
    (404, saying so)."""
    given = [
        Group(by, v)
        for by, v in zip(("scenario", "tenant", "deploy"), (scenario, tenant, deploy), strict=True)
        if v
    ]
    if len(given) > 1:
        raise HTTPException(
            404,
            "no series is kept for two group filters at once: filter by one of "
            "`scenario`, `tenant` and `deploy` at a time (groups are kept per field)",
        )
    return given[0] if given else None


#: The largest `offset` taken: beyond any list, and within a 64-bit integer.
MAX_OFFSET = 2**53
# Pages (docs/groups.md, "Pages"): `limit` entries after the first `offset`. The
# schema's bound is the settings' ceiling (more is a 422); `page_param` holds
# `limit` to the configured `read_page_max`.
LimitParam = Annotated[
    int | None,
    Query(
        ge=1,
        le=READ_PAGE_CEILING,
        description="entries per page (default CACHEWATCH_READ_PAGE_LIMIT, at most "
        "CACHEWATCH_READ_PAGE_MAX)",
    ),
]
OffsetParam = Annotated[
    int, Query(ge=0, le=MAX_OFFSET, description="entries to skip: the `Link` header's next page")
]


def page_param(settings: Settings, limit: int | None, offset: int) -> Page:
    """The page asked for: `limit` entries (default `read_page_limit`; more than
    `read_page_max` answers that many, as GitHub answers `per_page`, and the `Link`
    header goes on from there) after `offset` entries."""
    wanted = limit if limit is not None else settings.read_page_limit
    return Page(min(wanted, settings.read_page_max), offset)


def page_headers(request: Request, response: Response, paged: Paged) -> None:
    """`X-Total-Count` (entries in the whole list) and, unless this is the last
    page, `Link: <next>; rel="next"`: this request's URL with the next `offset` and
    this page's `limit`, every other parameter kept (GitHub's convention)."""
    response.headers["X-Total-Count"] = str(paged.total)
    after = paged.next_offset
    if after is not None:
        url = request.url.include_query_params(limit=paged.page.limit, offset=after)
        response.headers["Link"] = f'<{url}>; rel="next"'
