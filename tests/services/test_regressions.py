"""`GET /v1/regressions`'s service: regressions newest change first, of a service
and status when asked, at most `limit` of them."""

from sqlalchemy.orm import Session

from service.models import Regression
from service.services.regressions import list_regressions, regression_to_json
from tests.alerts.conftest import FIXED_REGRESSION

HOUR_US = 3600 * 1_000_000


def add(session: Session, hours: int, **changes: object) -> int:
    change_us = int(FIXED_REGRESSION["change_ts_us"]) + hours * HOUR_US
    regression = Regression(**{**FIXED_REGRESSION, "change_ts_us": change_us, **changes})
    session.add(regression)
    session.flush()
    return regression.id


def test_regressions_are_listed_newest_change_first_and_filtered(session: Session) -> None:
    old = add(session, 0)
    resolved = add(session, 2, status="resolved", resolved_at_us=1)
    other = add(session, 1, service="search")
    assert [r.id for r in list_regressions(session, None, None, 10)] == [resolved, other, old]
    assert [r.id for r in list_regressions(session, "assistant", None, 10)] == [resolved, old]
    assert [r.id for r in list_regressions(session, None, "open", 10)] == [other, old]
    assert [r.id for r in list_regressions(session, None, None, 1)] == [resolved]


def test_a_regression_is_shown_with_rfc3339_times(session: Session) -> None:
    add(session, 0)
    (shown,) = (regression_to_json(r) for r in list_regressions(session, None, None, 1))
    assert shown["change_ts"] == "2026-11-23T14:25:00Z"
    assert (shown["status"], shown["resolved_at"]) == ("open", None)


def test_a_regression_shows_its_group_null_for_the_whole_service(session: Session) -> None:
    """Contract section 5's `group` from the columns ('' for none); `canary` null
    until detection stores one."""
    add(session, 0)
    add(session, 1, group_by="scenario", group_value="ticket-summary")
    shown = [regression_to_json(r) for r in list_regressions(session, None, None, 10)]
    assert [r["group"] for r in shown] == [{"by": "scenario", "value": "ticket-summary"}, None]
    assert [r["canary"] for r in shown] == [None, None]
