"""GET /v1/sessions: conversations in a range, most spend first (docs/groups.md,
"Sessions")."""

from typing import Any

from fastapi import APIRouter, Request, Response

from service.api.deps import ReadAuth, ReadSessionDep, SettingsDep
from service.api.params import (
    LimitParam,
    ModelParam,
    OffsetParam,
    ServiceParam,
    TenantParam,
    TimeParam,
    ToParam,
    page_headers,
    page_param,
    parse_time_param,
)
from service.api.schemas import READ_ERRORS, SessionOut
from service.repository.sessions import CallFilter
from service.services.sessions import sessions

router = APIRouter(tags=["analytics"], responses=READ_ERRORS)


@router.get("/v1/sessions", dependencies=[ReadAuth], response_model=list[SessionOut])
def get_sessions(
    request: Request,
    response: Response,
    session: ReadSessionDep,
    settings: SettingsDep,
    service: ServiceParam = None,
    model: ModelParam = None,
    tenant: TenantParam = None,
    from_: TimeParam = None,
    to: ToParam = None,
    limit: LimitParam = None,
    offset: OffsetParam = 0,
) -> list[dict[str, Any]]:
    """Each conversation (`session_id`) with calls in the range, most spend first:
    its requests, first and last call, models, tenant, tokens, hit rate, spend, and
    its cache writes that no later call of it read within their TTL (unread: their
    write premium wasted). Read from the raw records (as far back as retention
    keeps them). One page of at most `limit` (default `CACHEWATCH_READ_PAGE_LIMIT`)
    after `offset`; `X-Total-Count` and `Link: <...>; rel="next"` as for groups."""
    where = CallFilter(
        service=service or None,
        model=model or None,
        tenant=tenant or None,
        from_us=parse_time_param("from", from_),
        to_us=parse_time_param("to", to),
    )
    paged = sessions(session, settings, where, page_param(settings, limit, offset))
    page_headers(request, response, paged)
    return paged.entries
