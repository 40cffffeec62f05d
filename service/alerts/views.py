"""Alerts as `GET /v1/alerts` shows them."""

from typing import Any

from service.models import Alert, Regression
from service.rfc3339 import us_to_rfc3339


def _time(us: int | None) -> str | None:
    return us_to_rfc3339(us) if us is not None else None


def alert_to_json(alert: Alert, regression: Regression) -> dict[str, Any]:
    waiting = alert.state in ("pending", "no_webhook")
    return {
        "id": alert.id,
        "regression_id": alert.regression_id,
        "service": regression.service,
        "model": regression.model,
        "kind": alert.kind,
        "state": alert.state,
        "attempts": alert.attempts,
        "created_at": _time(alert.created_us),
        "updated_at": _time(alert.updated_us),
        "next_attempt_at": _time(alert.next_attempt_us) if waiting else None,
        "lease_until": _time(alert.lease_until_us) if alert.state == "sending" else None,
        "sent_at": _time(alert.sent_us),
        # Alerts sent together (one digest) share it.
        "delivery_id": alert.claim,
        "last_status": alert.last_status,
        "last_error": alert.last_error,
    }
