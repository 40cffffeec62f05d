"""GET /v1/findings: the anti-patterns of a range (contract sections 5b and 6)."""

from typing import Any

from fastapi import APIRouter

from service.api.deps import ReadAuth, SessionDep, SettingsDep
from service.api.freshness import CaughtUp
from service.api.params import ModelParam, ServiceParam, TimeParam, ToParam, parse_time_param
from service.api.schemas import READ_ERRORS, FindingOut
from service.services.findings import findings

router = APIRouter(tags=["analytics"], responses=READ_ERRORS)


@router.get("/v1/findings", dependencies=[ReadAuth, CaughtUp], response_model=list[FindingOut])
def get_findings(
    session: SessionDep,
    settings: SettingsDep,
    service: ServiceParam = None,
    model: ModelParam = None,
    from_: TimeParam = None,
    to: ToParam = None,
) -> list[dict[str, Any]]:
    """The anti-patterns present in the range, whether or not anything changed, each
    affecting at least `CACHEWATCH_FINDING_MIN_SHARE` of its (service, model)'s prompt
    tokens, most wasted tokens first, with evidence and the fix (docs/findings.md).
    Computed on read over the hours that start in the range."""
    result = findings(
        session,
        settings,
        service=service or None,
        model=model or None,
        from_us=parse_time_param("from", from_),
        to_us=parse_time_param("to", to),
    )
    return [f.as_json() for f in result.findings]
