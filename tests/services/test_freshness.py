"""`catch_up_before_read` brings the rollups up to every committed record in a
transaction of its own: a read that follows counts them without writing, and the
next catch-up finds nothing left to do."""

from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from service import repository
from service.models import Rollup
from service.services import analytics_pass
from service.services.freshness import catch_up_before_read
from service.settings import Settings
from tests.simulated import load_records

T0_S = 1_764_399_600


def records(count: int) -> list[dict[str, Any]]:
    return [
        {"request_id": f"f-{i}", "ts": T0_S + i, "service": "s", "model": "m",
         "prompt_tokens": 1000, "cached_tokens": 250}
        for i in range(count)
    ]  # fmt: skip


def counted(session: Session) -> int:
    """Requests the minute rollups count."""
    total = session.scalar(select(func.sum(Rollup.requests)).where(Rollup.grain_s == 60))
    return int(total or 0)


def test_a_read_after_the_catch_up_counts_every_committed_record(
    session_factory: sessionmaker[Session], settings: Settings
) -> None:
    with session_factory.begin() as session:
        load_records(session, records(7), [])
    report = catch_up_before_read(session_factory, settings)
    assert report.records == 7
    with session_factory() as reader:  # a read-only session, as the route's
        assert counted(reader) == 7
        assert repository.get_cursor(reader, analytics_pass.CURSOR) == (
            repository.max_usage_id(reader)
        )
        assert not reader.new and not reader.dirty


def test_what_a_catch_up_did_is_not_done_again(
    session_factory: sessionmaker[Session], settings: Settings
) -> None:
    with session_factory.begin() as session:
        load_records(session, records(3), [])
    assert catch_up_before_read(session_factory, settings).records == 3
    again = catch_up_before_read(session_factory, settings)
    assert (again.records, again.recomputed_from_us) == (0, None)
    with session_factory() as reader:
        assert counted(reader) == 3
