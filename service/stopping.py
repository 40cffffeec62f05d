"""A background job that stops between its steps when its process is stopping.

`cachewatch serve` runs the jobs on a thread pool (`service.worker`). On SIGTERM the
server first drains its requests, and a request can wait on a job in progress: a
read's catch-up waits for the pass lock a detection pass holds to its end (on
PostgreSQL for as long as it takes, on SQLite its busy timeout). So a detection pass
over many services held a stopping server for as long as it had left (issue 32: more
than 10 s, then SIGKILL).

The scheduler's sessions carry a stop request (`stopping_on`), set as soon as SIGTERM
or SIGINT arrives (`stop_on_signals`) and when the scheduler shuts down. A long job
asks for it between its steps (`check`: detection between (service, model)s and
between the groups of one) and raises PassStopped. Its transaction is rolled back,
so nothing it did is half-stored, its lock is released (the waiting request goes on,
the drain ends), and its next run, in this process or the next, does it all again.
A session without a stop request (a request, `cachewatch detect`, a test) never
stops."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from threading import Event
from types import FrameType

from sqlalchemy.orm import Session, sessionmaker

STOP_KEY = "cachewatch_stop_requested"


class PassStopped(Exception):
    """A job stopped between two steps because its process is stopping."""


def stopping_on(factory: sessionmaker[Session], stop: Event) -> sessionmaker[Session]:
    """`factory` whose sessions stop at their next `check` once `stop` is set (the
    same engine and options)."""
    info = {**factory.kw.get("info", {}), STOP_KEY: stop.is_set}
    return sessionmaker(**{**factory.kw, "info": info})


def check(session: Session) -> None:
    """Raise PassStopped if the session's process is stopping: call it between steps
    that leave nothing half-done."""
    requested: Callable[[], bool] | None = session.info.get(STOP_KEY)
    if requested is not None and requested():
        raise PassStopped


def stop_on_signals(stop: Event) -> None:
    """Set `stop` as soon as SIGTERM or SIGINT arrives, then do what the handler in
    place does (uvicorn's graceful shutdown; the default: end the process). Signals
    are handled in the main thread only: elsewhere (an app under a test client) the
    scheduler's shutdown alone sets it."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _chained(stop, signal.getsignal(sig)))


def _chained(stop: Event, previous: object) -> Callable[[int, FrameType | None], None]:
    """A handler that sets `stop`, then hands the signal to `previous`."""

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)

    return handler
