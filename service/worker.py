"""Background jobs on a schedule (APScheduler): the analytics pass, detection,
alert delivery and retention. Each job runs in its own transaction and takes
its own database lock, so several processes may run the scheduler and each job
still runs once at a time.

A job waits for a pass in progress elsewhere (another process's job, a
`cachewatch detect`) at most `pass_lock_wait_s` (`service.db.waiting_for_locks`);
past that it skips this run with one warning line and runs at its next interval."""

import logging
from collections.abc import Callable

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.blocking import BlockingScheduler
from sqlalchemy.orm import Session, sessionmaker

from service.alerts import delivery as alerts_delivery
from service.db import PassBusy, waiting_for_locks
from service.services import analytics_pass, detection, retention
from service.settings import Settings

log = logging.getLogger(__name__)


def jobs(settings: Settings) -> list[tuple[str, Callable[[Session, Settings], object], int]]:
    return [
        ("analytics", analytics_pass.catch_up, settings.analytics_interval_s),
        ("detection", detection.detect, settings.detect_interval_s),
        ("alerts", alerts_delivery.run_job, settings.alerts_interval_s),
        ("retention", retention.run_job, settings.retention_interval_s),
    ]


def _run(
    name: str,
    job: Callable[[Session, Settings], object],
    factory: sessionmaker[Session],
    settings: Settings,
) -> None:
    try:
        with factory.begin() as session:
            job(session, settings)
    except PassBusy as busy:
        log.warning(
            "job %s skipped: another pass holds the database (waited %g s); "
            "it runs again at its next interval",
            name,
            busy.waited_s,
        )
    except Exception:
        # A failing job (database down) is retried at its next run; never fatal.
        log.exception("job %s failed", name)


def configure(
    scheduler: BackgroundScheduler | BlockingScheduler,
    factory: sessionmaker[Session],
    settings: Settings,
) -> None:
    factory = waiting_for_locks(factory, settings.pass_lock_wait_s)
    for name, job, interval in jobs(settings):
        scheduler.add_job(
            _run,
            "interval",
            seconds=interval,
            args=(name, job, factory, settings),
            id=name,
            name=name,  # in APScheduler's own lines ("... skipped: maximum number ...")
            max_instances=1,
            coalesce=True,
        )


def start_background(factory: sessionmaker[Session], settings: Settings) -> BackgroundScheduler:
    scheduler = BackgroundScheduler(daemon=True)
    configure(scheduler, factory, settings)
    scheduler.start()
    return scheduler


def run_forever(factory: sessionmaker[Session], settings: Settings) -> None:
    scheduler = BlockingScheduler()
    configure(scheduler, factory, settings)
    scheduler.start()
