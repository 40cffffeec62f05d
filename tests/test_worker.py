"""service.worker's step gate: on SQLite the jobs' steps go one at a time and leave
the write lock free between them, so ingest posts waiting for it get in (measured
with a real server, bench/card_stream.py on SQLite: one 503 in each of two runs
before the gate, none in the run after)."""

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import pairwise
from types import SimpleNamespace
from typing import Any

import pytest

from service import worker
from service.settings import Settings
from tests.conftest import is_postgres_run

pytestmark = pytest.mark.skipif(is_postgres_run(), reason="touches no database: run once")

STEP_S = 0.1


def _steps(sqlite: bool) -> list[tuple[float, float]]:
    """Two jobs of three steps each, run at once through the gate: each step's
    (start, end)."""
    gate, spans = worker._StepGate(), []

    def job() -> None:
        for _ in range(3):
            with gate.step(sqlite):
                began = time.monotonic()
                time.sleep(STEP_S)
                spans.append((began, time.monotonic()))

    threads = [threading.Thread(target=job) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(spans)


def test_on_sqlite_steps_take_turns_with_a_gap_between_them() -> None:
    spans = _steps(sqlite=True)
    gaps = [then[0] - before[1] for before, then in pairwise(spans)]
    assert len(spans) == 6 and min(gaps) >= worker._StepGate.GAP_S - 0.01, gaps


def test_elsewhere_steps_of_two_jobs_run_at_once() -> None:
    spans = _steps(sqlite=False)
    assert any(then[0] < before[1] for before, then in pairwise(spans))


class _Factory:
    """The worker's session factory, without a database: sessions that only carry
    `info` (what the worker and `stopping.check` read)."""

    @contextmanager
    def begin(self) -> Iterator[SimpleNamespace]:
        yield SimpleNamespace(info={})


def test_alerts_wait_for_a_detection_run_in_progress() -> None:
    """A detection run of three steps and an alerts run started during it: the alerts
    job runs after the last step, so one pass's regressions go out as one digest."""
    events: list[str] = []

    class Detection:
        steps = 3

        def __call__(self, session: object, settings: Settings) -> SimpleNamespace:
            self.steps -= 1
            events.append("detection step")
            time.sleep(0.1)
            return SimpleNamespace(more=self.steps > 0)

    def alerts(session: object, settings: Settings) -> None:
        events.append("alerts")

    settings = Settings(database_url="postgresql+psycopg://unused/none")
    factory: Any = _Factory()
    detecting = threading.Thread(
        target=worker._run, args=("detection", Detection(), factory, settings)
    )
    detecting.start()
    time.sleep(0.05)  # within the first step
    worker._run("alerts", alerts, factory, settings)
    detecting.join()
    assert events == ["detection step"] * 3 + ["alerts"]
