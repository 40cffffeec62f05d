"""The detection job on a simulated week with known changes (issue: a deploy that
changes nothing, a timestamp at the top of the system prompt and its fix, a
scale-out to 4 round-robin replicas seen only in the records, a KV budget cut, a
cold fan-out, a traffic doubling, quiet nights)."""

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.models import ChangeEvent, Regression
from service.services.detection import detect
from service.services.regressions import regression_to_json
from service.settings import Settings
from service.simulate import DetectionWeek, SimulationResult, detection_week, simulate
from service.simulate.scoring import score
from service.stopping import STOP_KEY, PassStopped
from tests.services.traffic import drop_traffic, store
from tests.simulated import load_records

SEED = 7


@pytest.fixture(scope="module")
def week() -> tuple[DetectionWeek, SimulationResult]:
    scenario = detection_week(SEED)
    return scenario, simulate(scenario.scenario, SEED)


def test_simulated_week(
    week: tuple[DetectionWeek, SimulationResult],
    session: Session,
    settings: Settings,
    client: TestClient,
    read_headers: dict[str, str],
) -> None:
    scenario, result = week
    load_records(session, result.records, result.events)
    session.commit()

    report = detect(session, settings)
    found = [regression_to_json(r) for r in report.created]
    outcome = score(found, scenario.regressions)
    assert outcome.misses == [] and outcome.extras == [] and outcome.wrong == [], outcome
    assert outcome.matched == len(scenario.regressions) == 4
    # Every injected problem is fixed within the week: each is resolved.
    assert {r["status"] for r in found} == {"resolved"}
    prefix = next(r for r in found if r["cause"] == "prefix_instability")
    # The time at the top changes every minute: most requests start differently.
    assert prefix["after"]["unique_prefix_ratio"] > 0.5
    assert prefix["after"]["unique_prefix_ratio"] > 10 * prefix["before"]["unique_prefix_ratio"]
    assert any("segment `system`" in line for line in prefix["evidence"])
    routing = next(r for r in found if r["cause"] == "routing")
    assert routing["attributed_to"]["source"] == "inferred"
    assert any("replicas serving: 1 -> 4" in line for line in routing["evidence"])

    # Inferred events: the new deploy tags and the scale-out, never the nights.
    replicas = session.scalars(
        select(ChangeEvent).where(ChangeEvent.kind == "replicas", ChangeEvent.source == "inferred")
    ).all()
    assert [e.replicas for e in replicas][:1] == [4]

    # Idempotent: a second pass creates nothing and stores nothing twice.
    again = detect(session, settings)
    assert again.created == [] and again.inferred_events == 0
    assert session.scalar(select(func.count()).select_from(Regression)) == 4

    listed = client.get("/v1/regressions", headers=read_headers).json()
    assert [r["id"] for r in listed] == sorted((r["id"] for r in found), reverse=True)
    assert client.get("/v1/regressions?status=open", headers=read_headers).json() == []


def test_a_pass_whose_process_is_stopping_stops_between_services(
    session: Session, settings: Settings
) -> None:
    # Two services, each losing its warm prefix: the stop is asked for once the first
    # (service, model) is done, and the pass stops before the second with PassStopped
    # (its caller rolls the transaction back; the next pass does it all).
    for service in ("one", "two"):
        store(session, [{**r, "service": service, "request_id": f"{service}-{r['request_id']}"}
                        for r in drop_traffic()])  # fmt: skip

    def requested() -> bool:  # once the first service's regression is stored
        return bool(session.scalar(select(func.count()).select_from(Regression)))

    session.info[STOP_KEY] = requested
    with pytest.raises(PassStopped):
        detect(session, settings)
    (first,) = session.scalars(select(Regression.service)).all()
    del session.info[STOP_KEY]
    (then,) = [r.service for r in detect(session, settings).created]
    assert {first, then} == {"one", "two"}
