"""The detection job on a simulated week with known changes (issue: a deploy that
changes nothing, a timestamp at the top of the system prompt and its fix, a
scale-out to 4 round-robin replicas seen only in the records, a KV budget cut, a
cold fan-out, a traffic doubling, quiet nights)."""

import random
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from service import worker
from service.models import ChangeEvent, Regression
from service.services.analytics_pass import catch_up_step
from service.services.detection import DetectionJob, detect
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


class _Steps:
    """The worker's factory, counting its transactions; from step `stop_at` on, each
    session says the process is stopping (as `stopping_on` does on SIGTERM)."""

    def __init__(self, factory: sessionmaker[Session], stop_at: int | None = None) -> None:
        self.factory, self.stop_at, self.count = factory, stop_at, 0

    @contextmanager
    def begin(self) -> Iterator[Session]:
        self.count += 1
        with self.factory.begin() as session:
            if self.stop_at is not None and self.count >= self.stop_at:
                session.info[STOP_KEY] = lambda: True
            yield session


def test_the_job_detects_a_service_a_step_and_starts_over_when_stopped(
    session_factory: sessionmaker[Session], settings: Settings
) -> None:
    """The worker's detection job commits after each step of the analytics catch-up
    (the last one also infers the events and lists the (service, model)s), and after
    each (service, model): SQLite's write lock, and every
    ingest post waiting on it, is held one step at a time. Stopped mid-way, it drops
    its plan and the next run does every service; what it finds is what one
    transaction's `detect` finds (which then creates nothing)."""
    with session_factory.begin() as session:
        for service in ("one", "two", "three"):
            store(session, [{**r, "service": service, "request_id": f"{service}-{r['request_id']}"}
                            for r in drop_traffic()])  # fmt: skip
    job = DetectionJob()
    stopped = _Steps(session_factory, stop_at=3)
    worker._run("detection", job, stopped, settings)  # type: ignore[arg-type]
    assert stopped.count == 3
    with session_factory() as session:
        assert session.scalars(select(Regression.service)).all() == ["one"]
    steps = _Steps(session_factory)
    worker._run("detection", job, steps, settings)  # type: ignore[arg-type]
    assert steps.count == 1 + 3  # the catch-up, events and plan; then each service
    with session_factory() as session:
        assert sorted(session.scalars(select(Regression.service))) == ["one", "three", "two"]
        assert detect(session, settings).created == []


def _found(session: Session) -> list[tuple[object, ...]]:
    rows = session.execute(
        select(Regression.service, Regression.cause, Regression.change_ts_us, Regression.status)
    ).all()
    return sorted(tuple(r) for r in rows)


def test_a_shuffled_stream_detected_between_batches_finds_what_one_pass_finds(
    session_factory: sessionmaker[Session], settings: Settings
) -> None:
    """Issue 32: records arriving shuffled, in batches, with the worker's analytics
    and detection jobs run after each: the regressions at the end are one pass's
    over the complete data (`bench/card_stream.py` does it with a real server)."""
    records = [{**r, "service": s, "request_id": f"{s}-{r['request_id']}"}
               for s in ("one", "two") for r in drop_traffic()]  # fmt: skip
    random.Random(4).shuffle(records)
    job = DetectionJob()
    for start in range(0, len(records), 80):
        with session_factory.begin() as session:
            store(session, records[start : start + 80])
        worker._run("analytics", catch_up_step, session_factory, settings)
        worker._run("detection", job, session_factory, settings)
    with session_factory.begin() as session:
        detect(session, settings)
        streamed = _found(session)
        session.execute(delete(Regression))
        detect(session, settings)
        assert streamed == _found(session) and len(streamed) == 2
