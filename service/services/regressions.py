"""Regressions as the API and CLI show them (contract section 5)."""

from typing import Any

from service.ingest.timestamps import us_to_rfc3339
from service.models import Regression


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
    }
