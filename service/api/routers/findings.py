"""GET /v1/findings: the anti-patterns of a range (contract sections 5b and 6)."""

from typing import Any

from fastapi import APIRouter, Request, Response

from service.api.deps import ReadAuth, ReadSessionDep, SettingsDep
from service.api.freshness import CaughtUp
from service.api.params import (
    LimitParam,
    ModelParam,
    OffsetParam,
    ServiceParam,
    TimeParam,
    ToParam,
    page_headers,
    page_param,
    parse_time_param,
)
from service.api.schemas import READ_ERRORS, FindingOut
from service.services.findings import findings
from service.services.paging import Paged

router = APIRouter(tags=["analytics"], responses=READ_ERRORS)


@router.get("/v1/findings", dependencies=[ReadAuth, CaughtUp], response_model=list[FindingOut])
def get_findings(
    request: Request,
    response: Response,
    session: ReadSessionDep,
    settings: SettingsDep,
    service: ServiceParam = None,
    model: ModelParam = None,
    from_: TimeParam = None,
    to: ToParam = None,
    limit: LimitParam = None,
    offset: OffsetParam = 0,
) -> list[dict[str, Any]]:
    """The anti-patterns present in the range, whether or not anything changed, each
    affecting at least `CACHEWATCH_FINDING_MIN_SHARE` of its (service, model)'s prompt
    tokens, most wasted tokens first, with evidence and the fix (docs/findings.md).
    Computed on read over the hours that start in the range. One page of at most
    `limit` findings (default `CACHEWATCH_READ_PAGE_LIMIT`) after `offset`;
    `X-Total-Count` says how many there are and `Link: <...>; rel="next"` gives the
    next page."""
    page = page_param(settings, limit, offset)
    result = findings(
        session,
        settings,
        service=service or None,
        model=model or None,
        from_us=parse_time_param("from", from_),
        to_us=parse_time_param("to", to),
    )
    paged = Paged([f.as_json() for f in page.of(result.findings)], len(result.findings), page)
    page_headers(request, response, paged)
    return paged.entries
