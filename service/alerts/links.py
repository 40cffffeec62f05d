"""Links from an alert to the dashboard, filtered on the regression's service, model,
group and time (`CACHEWATCH_PUBLIC_URL`)."""

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode

from service.alerts.subject import group_of
from service.alerts.wording import parse_time

# Enough on each side of the change to see the level before and after it.
_CONTEXT = timedelta(hours=3)


def _rfc3339(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def dashboard_url(public_url: str, regression: Mapping[str, Any]) -> str:
    """`{public_url}/?service=..&model=..&from=..&to=..`, every value percent-encoded
    (a model name may hold `/`, `&` or spaces); a group's regression adds
    `group_by=..&group_value=..` after the model, the dashboard's group selector."""
    change = parse_time(str(regression["change_ts"]))
    end = change + _CONTEXT
    if regression.get("resolved_at"):
        end = max(end, parse_time(str(regression["resolved_at"])) + timedelta(hours=1))
    params = {"service": str(regression["service"]), "model": str(regression["model"])}
    group = group_of(regression)
    if group is not None:
        params |= {"group_by": group.by, "group_value": group.value}
    query = urlencode(
        params | {"from": _rfc3339(change - _CONTEXT), "to": _rfc3339(end)},
        quote_via=quote,
        safe="",
    )
    return f"{public_url.rstrip('/')}/?{query}"
