from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query

from service.alerts.views import alert_to_json
from service.api.deps import ReadAuth, ReadSessionDep
from service.api.params import ServiceParam
from service.api.schemas import READ_ERRORS
from service.services.alerts import list_alerts

router = APIRouter(tags=["alerts"], responses=READ_ERRORS)

State = Literal["pending", "sending", "sent", "failed", "no_webhook"]


@router.get("/v1/alerts", dependencies=[ReadAuth])
def get_alerts(
    session: ReadSessionDep,
    state: State | None = None,
    kind: Literal["opened", "resolved"] | None = None,
    regression_id: Annotated[int | None, Query(ge=1, le=2**62)] = None,
    service: ServiceParam = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> list[dict[str, Any]]:
    """Slack alerts with their delivery state, newest first."""
    rows = list_alerts(
        session,
        state=state,
        kind=kind,
        regression_id=regression_id,
        service=service or None,
        limit=limit,
    )
    return [alert_to_json(alert, regression) for alert, regression in rows]
