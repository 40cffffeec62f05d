"""Links from an alert to the dashboard, filtered on the regression's service, model
and time (`CACHEWATCH_PUBLIC_URL`)."""

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode

from service.alerts.wording import parse_time

# Enough on each side of the change to see the level before and after it.
_CONTEXT = timedelta(hours=3)


def _rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def dashboard_url(public_url: str, regression: Mapping[str, Any]) -> str:
    """`{public_url}/?service=..&model=..&from=..&to=..`, every value percent-encoded
    (a model name may hold `/`, `&` or spaces)."""
    change = parse_time(str(regression["change_ts"]))
    end = change + _CONTEXT
    if regression.get("resolved_at"):
        end = max(end, parse_time(str(regression["resolved_at"])) + timedelta(hours=1))
    query = urlencode(
        {
            "service": str(regression["service"]),
            "model": str(regression["model"]),
            "from": _rfc3339(change - _CONTEXT),
            "to": _rfc3339(end),
        },
        quote_via=quote,
        safe="",
    )
    return f"{public_url.rstrip('/')}/?{query}"
