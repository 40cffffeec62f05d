"""Background jobs on a schedule (APScheduler): the analytics pass, detection,
alert delivery and retention. Each job runs in its own transaction and takes
its own database lock, so several processes may run the scheduler and each job
still runs once at a time.

A job waits for a pass in progress elsewhere (another process's job, a
`cachewatch detect`) at most `pass_lock_wait_s` (`service.db.waiting_for_locks`);
past that it skips this run with one warning line and runs at its next interval."""

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from threading import Event

from apscheduler.events import EVENT_SCHEDULER_SHUTDOWN
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.blocking import BlockingScheduler
from sqlalchemy.orm import Session, sessionmaker

from service import stopping
from service.alerts import delivery as alerts_delivery
from service.db import PassBusy, waiting_for_locks
from service.repository.locks import LOCKED_AT
from service.services import analytics_pass, detection, retention
from service.settings import Settings
from service.stopping import PassStopped, stop_on_signals, stopping_on

log = logging.getLogger(__name__)


def jobs(settings: Settings) -> list[tuple[str, Callable[[Session, Settings], object], int]]:
    return [
        # One step per transaction (the loop in `_run`): ingestion gets in between.
        ("analytics", analytics_pass.catch_up_step, settings.analytics_interval_s),
        ("detection", detection.DetectionJob(), settings.detect_interval_s),
        ("alerts", alerts_delivery.run_job, settings.alerts_interval_s),
        ("retention", retention.run_job, settings.retention_interval_s),
    ]


class _StepGate:
    """On SQLite the jobs' steps take turns with ingestion: one step of any job at a
    time in this process, and the write lock left free for `GAP_S` after each, so
    an ingest post waiting for it (SQLite's busy handler retries every 100 ms at
    most) gets in between two steps instead of waiting behind a chain of them (an
    analytics step, then a detection step, then the alerts job...) until its busy
    timeout and a 503. On PostgreSQL, where ingestion does not wait on the jobs,
    every step goes through at once."""

    GAP_S = 0.15

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free_at = 0.0

    @contextmanager
    def step(self, sqlite: bool) -> Iterator[None]:
        if not sqlite:
            yield
            return
        with self._lock:
            time.sleep(max(0.0, self._free_at - time.monotonic()))
            try:
                yield
            finally:
                self._free_at = time.monotonic() + self.GAP_S


_GATE = _StepGate()


def _run(
    name: str,
    job: Callable[[Session, Settings], object],
    factory: sessionmaker[Session],
    settings: Settings,
) -> None:
    with _ALONE.get(name, nullcontext()):
        _run_steps(name, job, factory, settings)


#: Detection and alert delivery never run at once in one process: detection commits
#: a (service, model) at a time, and a delivery between two of its steps would split
#: one pass's regressions into several Slack messages instead of one digest.
_DETECTION_OR_ALERTS = threading.Lock()
_ALONE = {"detection": _DETECTION_OR_ALERTS, "alerts": _DETECTION_OR_ALERTS}


def _run_steps(
    name: str,
    job: Callable[[Session, Settings], object],
    factory: sessionmaker[Session],
    settings: Settings,
) -> None:
    if (restart := getattr(job, "restart", None)) is not None:
        restart()  # a job of steps that holds a plan starts a new one each run
    try:
        more = True
        while more:  # a job that works in steps says whether another one is due
            with _GATE.step(settings.database_url.startswith("sqlite")):
                with factory.begin() as session:
                    stopping.check(session)  # a stopping process starts no further step
                    more = getattr(job(session, settings), "more", False) is True
                _note_long_step(name, session, settings)
    except PassBusy as busy:
        log.warning(
            "job %s skipped: another pass holds the database (waited %g s); "
            "it runs again at its next interval",
            name,
            busy.waited_s,
        )
    except PassStopped:
        log.info("job %s stopped: the process is stopping; its next run does it again", name)
    except Exception:
        # A failing job (database down) is retried at its next run; never fatal.
        log.exception("job %s failed", name)


def _note_long_step(name: str, session: Session, settings: Settings) -> None:
    """On SQLite, a step that held the write lock (from when it took it, not while it
    waited for it) over half the busy timeout: ingest posts waiting on it may have
    been answered 503 meanwhile."""
    locked_at = session.info.get(LOCKED_AT)
    if locked_at is None:
        return
    took_s = time.monotonic() - locked_at
    if took_s * 2000 > settings.sqlite_busy_timeout_ms:
        log.warning(
            "job %s: one step took %.1f s (CACHEWATCH_SQLITE_BUSY_TIMEOUT_MS is %d)",
            name,
            took_s,
            settings.sqlite_busy_timeout_ms,
        )


def configure(
    scheduler: BackgroundScheduler | BlockingScheduler,
    factory: sessionmaker[Session],
    settings: Settings,
) -> Event:
    """The jobs on `scheduler`; returns the event that stops a job in progress at
    its next step (set when the scheduler shuts down; service.stopping)."""
    stop = Event()
    scheduler.add_listener(lambda _: stop.set(), EVENT_SCHEDULER_SHUTDOWN)
    factory = stopping_on(waiting_for_locks(factory, settings.pass_lock_wait_s), stop)
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
    return stop


def start_background(factory: sessionmaker[Session], settings: Settings) -> BackgroundScheduler:
    scheduler = BackgroundScheduler(daemon=True)
    stop_on_signals(configure(scheduler, factory, settings))
    scheduler.start()
    return scheduler


def run_forever(factory: sessionmaker[Session], settings: Settings) -> None:
    scheduler = BlockingScheduler()
    configure(scheduler, factory, settings)
    scheduler.start()
