"""Retention deletes old raw records in batches and nothing else: not records the
analytics pass has not consumed, not the rollups or regressions built from them, and
a late record older than the horizon cannot make the pass rebuild (and so lose)
rollups of deleted history."""

import time
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from service.models import Regression, RejectedRecord, Rollup, UsageRecord
from service.repository import retention as retention_queries
from service.services import analytics_pass
from service.services.retention import DAY_US, purge
from service.settings import Settings
from tests.alerts.conftest import FIXED_REGRESSION
from tests.simulated import load_records

NOW_US = time.time_ns() // 1000
HOUR_US = 3600 * 1_000_000


def records(prefix: str, start_us: int, count: int, step_us: int) -> list[dict[str, Any]]:
    return [
        {
            "request_id": f"{prefix}-{i}",
            "ts": (start_us + i * step_us) / 1e6,
            "service": "assistant",
            "model": "m",
            "prompt_tokens": 1000,
            "cached_tokens": 500,
            "replica": f"pod-{i % 3}",
            "block_size": 64,
            "block_hashes": [7, 8, i % 5],
        }
        for i in range(count)
    ]


def store(factory: sessionmaker[Session], rows: list[dict[str, Any]]) -> None:
    with factory.begin() as session:
        load_records(session, rows, [])


def analyse(factory: sessionmaker[Session], settings: Settings) -> None:
    with factory.begin() as session:
        analytics_pass.catch_up(session, settings)


def counts(factory: sessionmaker[Session]) -> tuple[int, int]:
    """(raw records, requests counted in the minute rollups)."""
    with factory() as session:
        raw = session.scalar(select(func.count()).select_from(UsageRecord)) or 0
        rolled = session.scalar(select(func.sum(Rollup.requests)).where(Rollup.grain_s == 60))
    return raw, int(rolled or 0)


@pytest.fixture
def retain(settings: Settings) -> Settings:
    return settings.model_copy(update={"retention_days": 30, "retention_batch": 7})


def test_deletes_old_consumed_records_in_batches_and_keeps_rollups(
    session_factory: sessionmaker[Session], retain: Settings
) -> None:
    store(session_factory, records("old", NOW_US - 40 * DAY_US, 50, 60_000_000))
    store(session_factory, records("new", NOW_US - HOUR_US, 20, 60_000_000))
    with session_factory.begin() as session:
        session.add(Regression(**FIXED_REGRESSION))

    # Not analysed yet: nothing may go, however old.
    assert purge(session_factory, retain, NOW_US).usage_deleted == 0
    assert counts(session_factory) == (70, 0)

    analyse(session_factory, retain)
    report = purge(session_factory, retain, NOW_US)
    assert report.usage_deleted == 50
    assert report.batches == 8  # 50 records, 7 a batch
    assert counts(session_factory) == (20, 70)  # rollups still count all 70
    with session_factory() as session:
        assert session.scalar(select(func.count()).select_from(Regression)) == 1
        assert retention_queries.get_horizon(session) == report.usage_cutoff_us
        kept = session.scalars(select(UsageRecord.request_id)).all()
    assert all(r.startswith("new-") for r in kept)
    assert purge(session_factory, retain, NOW_US).usage_deleted == 0  # idempotent


def test_records_above_the_analytics_cursor_are_kept(
    session_factory: sessionmaker[Session], retain: Settings
) -> None:
    store(session_factory, records("old", NOW_US - 40 * DAY_US, 30, 60_000_000))
    store(session_factory, records("new", NOW_US - HOUR_US, 5, 60_000_000))
    analyse(session_factory, retain)
    # Arrives after the pass: as old as the deleted ones, but nobody has counted it.
    store(session_factory, records("late", NOW_US - 40 * DAY_US, 10, 60_000_000))
    assert purge(session_factory, retain, NOW_US).usage_deleted == 30
    with session_factory() as session:
        late = session.scalar(select(func.count()).where(UsageRecord.request_id.like("late-%")))
    assert late == 10


def test_a_record_older_than_the_horizon_does_not_rebuild_deleted_history(
    session_factory: sessionmaker[Session], retain: Settings
) -> None:
    """Rebuilding from the late record's hour would replace rollups built from
    deleted records by rollups of what is left: the pass must not."""
    store(session_factory, records("old", NOW_US - 40 * DAY_US, 30, 60_000_000))
    store(session_factory, records("new", NOW_US - HOUR_US, 5, 60_000_000))
    analyse(session_factory, retain)
    assert purge(session_factory, retain, NOW_US).usage_deleted == 30
    store(session_factory, records("late", NOW_US - 40 * DAY_US + 1, 3, 60_000_000))
    analyse(session_factory, retain)
    assert counts(session_factory) == (8, 35)  # stored, not counted, nothing lost
    # A late record after the horizon is still counted exactly.
    store(session_factory, records("recent", NOW_US - 3 * HOUR_US, 2, 60_000_000))
    analyse(session_factory, retain)
    assert counts(session_factory) == (10, 37)


def test_age_counts_from_the_newest_analysed_record(
    session_factory: sessionmaker[Session], retain: Settings
) -> None:
    """A replay of last year's traffic is not deleted on arrival; within it, records
    older than the retention before its newest record are."""
    last_year = NOW_US - 365 * DAY_US
    store(session_factory, records("replay", last_year, 40, DAY_US))  # 40 days of it
    analyse(session_factory, retain)
    report = purge(session_factory, retain, NOW_US)
    assert report.usage_deleted == 9  # days 0..8 are > 30 days before day 39
    assert counts(session_factory) == (31, 40)


def test_old_rejected_records_are_deleted(
    session_factory: sessionmaker[Session], retain: Settings
) -> None:
    def rejected(received_us: int) -> RejectedRecord:
        return RejectedRecord(received_us=received_us, endpoint="usage", reason="bad", raw=b"{}")

    with session_factory.begin() as session:
        session.add_all([rejected(NOW_US - 31 * DAY_US) for _ in range(10)])
        session.add_all([rejected(NOW_US - 29 * DAY_US) for _ in range(3)])
    report = purge(session_factory, retain, NOW_US)
    assert report.rejected_deleted == 10
    with session_factory() as session:
        assert session.scalar(select(func.count()).select_from(RejectedRecord)) == 3


def test_the_worker_runs_retention(
    session_factory: sessionmaker[Session], retain: Settings
) -> None:
    from service import worker
    from service.services import retention

    scheduled = {name: (job, interval) for name, job, interval in worker.jobs(retain)}
    assert scheduled["retention"] == (retention.run_job, retain.retention_interval_s)
    store(session_factory, records("old", NOW_US - 40 * DAY_US, 12, 60_000_000))
    store(session_factory, records("new", NOW_US - HOUR_US, 3, 60_000_000))
    analyse(session_factory, retain)
    with session_factory() as session:
        report = retention.run_job(session, retain)
    assert report.usage_deleted == 12
