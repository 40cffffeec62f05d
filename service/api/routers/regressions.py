from typing import Annotated, Any

from fastapi import APIRouter, Query

from service.api.deps import AdminAuth, ReadAuth, ReadSessionDep, SessionDep, SettingsDep
from service.api.params import ServiceParam
from service.api.schemas import READ_ERRORS, RegressionOut
from service.services.detection import detect
from service.services.regressions import Status, list_regressions, regression_to_json

router = APIRouter(tags=["regressions"], responses=READ_ERRORS)


@router.get("/v1/regressions", dependencies=[ReadAuth], response_model=list[RegressionOut])
def get_regressions(
    session: ReadSessionDep,
    service: ServiceParam = None,
    status: Status | None = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> list[dict[str, Any]]:
    """Regressions, newest change first."""
    rows = list_regressions(session, service or None, status, limit)
    return [regression_to_json(r) for r in rows]


@router.post(
    "/v1/detect",
    dependencies=[AdminAuth],
    response_model=list[RegressionOut],
)
def post_detect(
    session: SessionDep,
    settings: SettingsDep,
    service: ServiceParam = None,
) -> list[dict[str, Any]]:
    """Run one detection pass now (admin scope); the regressions it created or updated."""
    report = detect(session, settings, service or None)
    return [regression_to_json(r) for r in report.changed]
