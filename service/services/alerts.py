"""Slack alerts as `GET /v1/alerts` lists them: the outbox rows (`service.alerts`)
with their delivery state, each beside the regression it announces."""

from collections.abc import Sequence

from sqlalchemy.orm import Session

from service.models import Alert, Regression
from service.repository import alerts as alerts_repo


def list_alerts(
    session: Session,
    *,
    state: str | None,
    kind: str | None,
    regression_id: int | None,
    service: str | None,
    limit: int,
) -> Sequence[tuple[Alert, Regression]]:
    """At most `limit` alerts, newest first, each with its regression: in the
    delivery state, of the kind (`opened`, `resolved`), of the regression and of the
    regression's service when given."""
    return alerts_repo.list_alerts(
        session,
        state=state,
        kind=kind,
        regression_id=regression_id,
        service=service,
        limit=limit,
    )
