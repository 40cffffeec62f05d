"""Regressions as the API and CLI show them (contract section 5)."""

from collections.abc import Sequence
from typing import Any, Literal

from sqlalchemy.orm import Session

from service.models import Regression
from service.repository import detection as detection_repo
from service.rfc3339 import us_to_rfc3339

Status = Literal["open", "resolved"]


def list_regressions(
    session: Session, service: str | None, status: Status | None, limit: int
) -> Sequence[Regression]:
    """At most `limit` regressions of the service (None: all) in the status (None:
    any), the newest change first (`GET /v1/regressions`)."""
    return detection_repo.list_regressions(session, service, status, limit)


def regression_to_json(regression: Regression) -> dict[str, Any]:
    return {
        "id": regression.id,
        "service": regression.service,
        "model": regression.model,
        "change_ts": us_to_rfc3339(regression.change_ts_us),
        "detected_at": us_to_rfc3339(regression.detected_at_us),
        "status": regression.status,
        "resolved_at": (
            us_to_rfc3339(regression.resolved_at_us) if regression.resolved_at_us else None
        ),
        "before": regression.before,
        "after": regression.after,
        "attributed_to": regression.attributed_to,
        "cause": regression.cause,
        "evidence": regression.evidence,
        "cost": regression.cost,
        "group": group_json(regression),
        "canary": regression.canary,
    }


def group_json(regression: Regression) -> dict[str, str] | None:
    """Contract section 5's `group`: null for the whole service ('' in the columns)."""
    if not regression.group_by:
        return None
    return {"by": regression.group_by, "value": regression.group_value}
