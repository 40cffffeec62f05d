"""The dashboard's queries read the rows they are told to: top prefixes sum the
segments they are given (daily and hourly rows give what minute rows give), events
without a model count for every model, the capacity sample is the latest requests
with blocks, in order."""

from sqlalchemy.orm import Session

from service.models import Regression
from service.repository import alerts as alerts_repo
from service.repository import dashboard as dashboard_repo
from service.repository.dashboard import RollupRows
from service.repository.series import Segment
from service.services import analytics_pass
from service.services.events import EventIn, record_events
from service.services.rollup_writes import PREFIX_GRAINS_S
from service.services.series import plan
from service.settings import Settings
from tests.alerts.conftest import FIXED_REGRESSION
from tests.dashboards.helpers import records
from tests.simulated import load_records

DAY_S = 86_400
T0_S = 1_764_374_400  # 2025-11-29T00:00:00Z, a whole day
US = 1_000_000


def test_top_prefixes_from_coarse_rows_equal_those_from_minute_rows(
    session: Session, settings: Settings
) -> None:
    of_a = records(300, T0_S, 3 * DAY_S, service="a")
    load_records(session, of_a, [])
    load_records(session, records(100, T0_S + 3600, DAY_S, service="b", seed=1), [])
    analytics_pass.catch_up(session, settings)
    rows = RollupRows(("a", "b"), ("m",), None)
    from_us, to_us = (T0_S + 1800) * US, (T0_S + 3 * DAY_S - 600) * US
    coarse = plan(from_us, to_us, DAY_S, PREFIX_GRAINS_S)
    assert {s.grain_s for s in coarse} == {60, 3600, 86_400}
    minutes = [Segment(60, from_us, to_us)]
    top = dashboard_repo.top_prefixes(session, rows, coarse, 10)
    assert top == dashboard_repo.top_prefixes(session, rows, minutes, 10)
    in_range = sum(from_us <= r["ts"] * US < to_us for r in of_a)
    assert [(p["service"], p["requests"]) for p in top] == [("a", in_range), ("b", 100)]
    only_b = RollupRows(("b",), ("m",), "m")
    assert [p["service"] for p in dashboard_repo.top_prefixes(session, only_b, coarse, 10)] == ["b"]
    assert dashboard_repo.top_prefixes(session, rows, [], 10) == []


def test_events_without_a_model_count_for_every_model(session: Session) -> None:
    def at(minute: int, kind: str = "note", **fields: str) -> EventIn:
        return EventIn.model_validate(
            {"ts": (T0_S + 60 * minute) * US, "service": "s", "kind": kind, **fields}
        )

    record_events(
        session,
        [
            at(0, model="m"),
            at(1),
            at(2, model="other"),
            at(3, "config", description="KV cache budget 4096 tokens"),
            at(9, "config", model="m", description="after the range"),
        ],
    )
    found = dashboard_repo.events_in_range(session, "s", "m", T0_S * US, (T0_S + 300) * US, 10)
    assert [e.ts_us for e in found] == [(T0_S + 60 * m) * US for m in (3, 1, 0)]
    assert len(dashboard_repo.events_in_range(session, None, None, 0, 2**62, 2)) == 2
    configs = dashboard_repo.config_events_before(session, "s", "m", (T0_S + 300) * US, 10)
    assert [e.description for e in configs] == ["KV cache budget 4096 tokens"]


def test_the_capacity_sample_is_the_latest_requests_with_blocks(session: Session) -> None:
    rows = records(40, T0_S, 3600, service="a")
    for row in rows[30:]:  # the newest ten carry no blocks: not replayable
        del row["block_hashes"], row["block_size"]
    load_records(session, rows, [])
    frame = dashboard_repo.latest_block_frame(session, "m", T0_S * US, (T0_S + 3600) * US, 20)
    assert frame.columns == list(dashboard_repo.BLOCK_FRAME_SCHEMA)
    assert frame["ts_us"].to_list() == [round(r["ts"] * US) for r in rows[10:30]]
    assert dashboard_repo.newest_usage_id(session) == max(frame["id"].to_list()) + 10


def test_alert_states_list_each_alert_oldest_first(session: Session) -> None:
    regression = Regression(**FIXED_REGRESSION)
    quiet = Regression(**{**FIXED_REGRESSION, "model": "quiet"})
    session.add_all([regression, quiet])
    session.flush()
    alerts_repo.add_alert(session, regression.id, "opened", 1)
    alerts_repo.add_alert(session, regression.id, "resolved", 2)
    states = dashboard_repo.alert_states(session, [regression.id, quiet.id])
    assert states == {regression.id: ["opened: pending", "resolved: pending"]}
    assert dashboard_repo.alert_states(session, []) == {}
