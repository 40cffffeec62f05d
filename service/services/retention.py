"""Retention: raw usage records and rejected records older than
`CACHEWATCH_RETENTION_DAYS` are deleted, `retention_batch` rows per transaction, so
ingestion waits at most one short delete (SQLite has one writer at a time) and
PostgreSQL never holds a long lock or a huge undo. Rollups, regressions, events and
alerts are kept: they are what the dashboard and detection read.

Which records may go:

* only those the analytics pass has consumed (id <= its cursor): a record nobody
  has counted yet is never deleted, however old its `ts`;
* age is counted from the newest analysed record, or from now if that is earlier:
  a replay of last year's traffic is kept as long as live traffic would be, and a
  record stamped in the future cannot make everything look old;
* never within W + 1 hour of that newest record: a late record makes the pass
  rebuild from its hour, reloading W before it (`analytics_pass`), and those
  records must still be there.

The cutoff is stored as the retention horizon before anything is deleted; the
analytics pass does not rebuild results before horizon + W (it would rebuild them
from an incomplete history), and a record arriving with a `ts` before that point is
stored but not counted in the rollups (documented in docs/ingestion.md)."""

import time
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from service import repository
from service.repository import retention as retention_repo
from service.services import analytics_pass
from service.settings import Settings
from service.timeunits import DAY_US, HOUR_US

# Between batches: lets a writer waiting on SQLite's lock in before the next delete.
PAUSE_S = 0.01


@dataclass
class RetentionReport:
    usage_deleted: int = 0
    rejected_deleted: int = 0
    batches: int = 0
    usage_cutoff_us: int | None = None
    rejected_cutoff_us: int | None = None


def usage_bounds(session: Session, settings: Settings, now_us: int) -> tuple[int, int] | None:
    """(cutoff ts_us, highest deletable id), or None while nothing may be deleted."""
    progress = retention_repo.analytics_progress(
        session, analytics_pass.CURSOR, analytics_pass.STATE
    )
    if progress is None:
        return None
    cursor, newest_us = progress
    window_us = int(settings.reuse_window_s * 1_000_000)
    cutoff = min(
        min(now_us, newest_us) - settings.retention_days * DAY_US, newest_us - window_us - HOUR_US
    )
    return cutoff, cursor


def purge(
    factory: sessionmaker[Session], settings: Settings, now_us: int | None = None
) -> RetentionReport:
    """Delete everything retention allows, one short transaction per batch."""
    now_us = time.time_ns() // 1000 if now_us is None else now_us
    report = RetentionReport()
    last_id = 0
    while True:
        with factory.begin() as session:
            # The analytics pass reads records and the horizon in one transaction:
            # a batch waits for a running pass, and the next pass sees the horizon.
            repository.take_analytics_lock(session)
            bounds = usage_bounds(session, settings, now_us)
            if bounds is None:
                break
            cutoff, cursor = bounds
            step = retention_repo.delete_old_usage(
                session,
                after_id=last_id,
                up_to_id=cursor,
                before_us=cutoff,
                limit=settings.retention_batch,
            )
            if step is None:
                break
            retention_repo.raise_horizon(session, cutoff)
            deleted, last_id = step
        report.usage_deleted += deleted
        report.usage_cutoff_us = cutoff
        report.batches += 1
        time.sleep(PAUSE_S)

    rejected_cutoff = now_us - settings.retention_days * DAY_US
    report.rejected_cutoff_us = rejected_cutoff
    last_id = 0
    while True:
        with factory.begin() as session:
            step = retention_repo.delete_old_rejected(
                session,
                after_id=last_id,
                before_us=rejected_cutoff,
                limit=settings.retention_batch,
            )
            if step is None:
                break
            deleted, last_id = step
        report.rejected_deleted += deleted
        report.batches += 1
        time.sleep(PAUSE_S)
    return report


def run_job(session: Session, settings: Settings) -> RetentionReport:
    """The worker's entry (`service.worker.jobs`): like alert delivery, retention
    commits batch by batch, so it leaves the job's session unused and opens short
    sessions on the same bind."""
    factory = sessionmaker(bind=session.get_bind(), expire_on_commit=False, info=dict(session.info))
    return purge(factory, settings)
