"""The regressions a time range shows come from one query over the range, so an old
regression that overlaps it is found however many newer ones there are."""

from sqlalchemy.orm import Session

from service.models import Regression
from service.repository.detection import regressions_overlapping
from tests.alerts.conftest import FIXED_REGRESSION

HOUR_US = 3600 * 1_000_000


def add(session: Session, change_us: int, resolved_us: int | None, **changes: object) -> int:
    regression = Regression(
        **{
            **FIXED_REGRESSION,
            "change_ts_us": change_us,
            "resolved_at_us": resolved_us,
            "status": "open" if resolved_us is None else "resolved",
            **changes,
        }
    )
    session.add(regression)
    session.flush()
    return regression.id


def test_an_old_regression_overlapping_the_range_is_found_behind_many_newer(
    session: Session,
) -> None:
    t0 = 1_000 * HOUR_US
    long_open = add(session, t0, None)  # still open: overlaps every later range
    ended_before = add(session, t0 - HOUR_US, t0 + HOUR_US)
    session.add_all(
        Regression(**{**FIXED_REGRESSION, "change_ts_us": t0 + (10 + i) * HOUR_US})
        for i in range(1_200)
    )
    other_model = add(session, t0 + 2 * HOUR_US, None, model="other")
    session.flush()

    found = regressions_overlapping(
        session, "assistant", "acme-70b-instruct", t0 + 2 * HOUR_US, t0 + 5 * HOUR_US
    )
    assert [r.id for r in found] == [long_open]
    everything = regressions_overlapping(session, None, None, t0 + 2 * HOUR_US, t0 + 5 * HOUR_US)
    assert {r.id for r in everything} == {long_open, other_model}
    assert ended_before not in {r.id for r in everything}
