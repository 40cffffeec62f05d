"""service.worker's step gate: on SQLite the jobs' steps go one at a time and leave
the write lock free between them, so ingest posts waiting for it get in (measured
with a real server, bench/card_stream.py on SQLite: one 503 in each of two runs
before the gate, none in the run after)."""

import threading
import time
from itertools import pairwise

import pytest

from service import worker
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
