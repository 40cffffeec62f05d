"""Change events: stored once however often they are posted, and listed newest
first by service, model, kind and time range."""

from typing import Any

from sqlalchemy.orm import Session

from service.services.events import EventIn, event_to_json, list_events, record_events

T0_US = 1_764_399_600_000_000
ALL: dict[str, Any] = {"service": None, "model": None, "kind": None, "from_us": None, "to_us": None}


def event(minutes: int, kind: str = "note", **fields: object) -> EventIn:
    return EventIn.model_validate(
        {"ts": T0_US / 1e6 + 60 * minutes, "service": "s", "kind": kind, **fields}
    )


def test_an_event_posted_twice_is_stored_once(session: Session) -> None:
    first = record_events(session, [event(0, description="a")])
    again = record_events(session, [event(0, description="a"), event(1)])
    assert [created for _, created in first] == [True]
    assert [created for _, created in again] == [False, True]
    assert again[0][0].id == first[0][0].id
    assert len(list_events(session, **ALL, limit=10)) == 2


def test_events_are_listed_newest_first_and_filtered(session: Session) -> None:
    record_events(
        session,
        [
            event(0, "deploy", deploy="v1"),
            event(1, "replicas", replicas=3, model="m"),
            event(2, service="t"),
        ],
    )

    def kinds(**only: Any) -> list[str]:
        return [e.kind for e in list_events(session, **{**ALL, "limit": 10, **only})]

    assert kinds() == ["note", "replicas", "deploy"]
    assert kinds(service="s") == ["replicas", "deploy"]
    assert kinds(model="m") == ["replicas"]
    assert kinds(kind="deploy") == ["deploy"]
    assert kinds(from_us=T0_US + 60_000_000, to_us=T0_US + 120_000_000) == ["replicas"]
    assert kinds(limit=1) == ["note"]
    shown = event_to_json(list_events(session, **ALL, limit=1)[0])
    assert (shown["ts"], shown["source"]) == ("2025-11-29T07:02:00Z", "posted")
