"""GET /v1/groups: a group field's values within a scope (contract sections 4b, 6)."""

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request, Response

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
from service.api.schemas import READ_ERRORS, GroupOut
from service.services.groups import GroupsQuery, groups

router = APIRouter(tags=["analytics"], responses=READ_ERRORS)


@router.get("/v1/groups", dependencies=[ReadAuth, CaughtUp], response_model=list[GroupOut])
def get_groups(
    request: Request,
    response: Response,
    session: ReadSessionDep,
    settings: SettingsDep,
    by: Annotated[Literal["scenario", "tenant", "deploy"], Query()],
    service: ServiceParam = None,
    model: ModelParam = None,
    from_: TimeParam = None,
    to: ToParam = None,
    limit: LimitParam = None,
    offset: OffsetParam = 0,
) -> list[dict[str, Any]]:
    """Each value of `by` with data in the range, most prompt tokens first: the totals
    `/v1/metrics` answers with that value as its filter. Each hour keeps at most
    `CACHEWATCH_GROUP_VALUES_KEPT` values of a field, the rest summed in `(other)`,
    listed like a value (docs/groups.md). One page of at most `limit` values (default
    `CACHEWATCH_READ_PAGE_LIMIT`) after `offset`; `X-Total-Count` says how many there
    are and `Link: <...>; rel="next"` gives the next page."""
    query = GroupsQuery(
        service=service or None,
        model=model or None,
        by=by,
        from_us=parse_time_param("from", from_),
        to_us=parse_time_param("to", to),
    )
    paged = groups(session, query, page_param(settings, limit, offset))
    page_headers(request, response, paged)
    return paged.entries
