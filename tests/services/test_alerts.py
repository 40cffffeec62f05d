"""`GET /v1/alerts`'s service: each alert beside its regression, newest first,
filtered by state, kind, regression and the regression's service."""

from typing import Any

from sqlalchemy.orm import Session

from service.services.alerts import list_alerts
from tests.alerts.conftest import add_regression

ANY: dict[str, Any] = {
    "state": None,
    "kind": None,
    "regression_id": None,
    "service": None,
    "limit": 100,
}


def test_alerts_are_listed_with_their_regression_newest_first(session: Session) -> None:
    first = add_regression(session)
    second = add_regression(session, service="search", change_ts_us=first.change_ts_us + 1)
    listed = list_alerts(session, **ANY)
    assert [(a.regression_id, r.id) for a, r in listed] == [
        (second.id, second.id),
        (first.id, first.id),
    ]
    assert [a.kind for a, _ in listed] == ["opened", "opened"]


def test_the_filters_narrow_the_list(session: Session) -> None:
    first = add_regression(session)
    second = add_regression(session, service="search", change_ts_us=first.change_ts_us + 1)

    def ids(**only: Any) -> list[int]:
        return [r.id for _, r in list_alerts(session, **{**ANY, **only})]

    assert ids(service="search") == [second.id]
    assert ids(regression_id=first.id) == [first.id]
    assert ids(state="pending", kind="opened", limit=1) == [second.id]
    assert ids(kind="resolved") == []
    assert ids(state="sent") == []
