"""The outbox filled by detection: an `opened` alert per new regression, a `resolved`
one when it resolves, in the detection transaction, never twice."""

import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.models import Alert, Regression
from service.services.detection import detect
from service.settings import Settings
from tests.alerts.conftest import add_regression, alerts_of
from tests.alerts.traffic import drop_records
from tests.simulated import load_records


def kinds_by_service(session: Session) -> dict[str, list[str]]:
    rows = session.execute(
        select(Regression.service, Alert.kind, Alert.state)
        .join(Alert, Alert.regression_id == Regression.id)
        .order_by(Alert.id)
    ).all()
    found: dict[str, list[str]] = {}
    for service, kind, state in rows:
        assert state == "pending"
        found.setdefault(service, []).append(kind)
    return found


def test_detection_queues_one_alert_per_regression_and_kind(
    session: Session, settings: Settings
) -> None:
    records = drop_records("assistant", "m", recover=True) + drop_records("search", "m2")
    load_records(session, records, [])
    report = detect(session, settings)
    assert {r.service: r.status for r in report.created} == {
        "assistant": "resolved",
        "search": "open",
    }
    # Found already over: opened and resolved at once (they go out as one message).
    assert kinds_by_service(session) == {
        "assistant": ["opened", "resolved"],
        "search": ["opened"],
    }
    again = detect(session, settings)
    assert again.created == [] and len(again.updated) == 2
    assert session.scalar(select(func.count()).select_from(Alert)) == 3


def test_a_later_resolution_queues_its_alert_once(session: Session, settings: Settings) -> None:
    records = drop_records("assistant", "m", recover=True)
    cut = len(records) * 2 // 3  # before and after the drop, not yet the recovery
    load_records(session, records[:cut], [])
    [regression] = detect(session, settings).created
    assert regression.status == "open"
    assert kinds_by_service(session) == {"assistant": ["opened"]}
    load_records(session, records[cut:], [])
    report = detect(session, settings)
    assert [r.id for r in report.updated] == [regression.id]
    assert regression.status == "resolved"
    assert kinds_by_service(session) == {"assistant": ["opened", "resolved"]}
    detect(session, settings)
    assert session.scalar(select(func.count()).select_from(Alert)) == 2


def test_no_resolution_for_an_opening_nobody_heard(session: Session, settings: Settings) -> None:
    """A regression stored before alerts existed gets no lone resolution message."""
    from service.alerts import outbox

    regression = Regression(
        **{
            **_columns(add_regression(session)),
            "service": "old",
            "status": "resolved",
            "resolved_at_us": 1,
        }
    )
    session.add(regression)
    session.flush()
    assert outbox.enqueue_for_detection(session, [], [regression], 0) == 0
    assert alerts_of(session, [regression.id]) == []


def _columns(regression: Regression) -> dict[str, object]:
    return {
        c.key: getattr(regression, c.key) for c in Regression.__table__.columns if c.key != "id"
    }


def test_the_database_refuses_a_second_alert_of_a_kind(session: Session) -> None:
    regression = add_regression(session)
    session.add(
        Alert(
            regression_id=regression.id,
            kind="opened",
            state="pending",
            created_us=0,
            updated_us=0,
            next_attempt_us=0,
        )
    )
    with pytest.raises(IntegrityError):
        session.flush()
