"""The shipper: calls in, records out to cachewatch, never in the application's way.

The delivery protocol
---------------------
1. `submit(call)` runs on the application's thread. It only appends to a bounded
   queue (`put_nowait`): past `max_queue` calls or `max_queue_bytes` bytes the
   call is dropped and counted (`dropped`). It never waits, never does I/O and
   never raises: any fault in the client is counted (`errors`), not thrown.
2. One daemon thread, started on the first call (again after a fork), takes calls
   off the queue, turns each into its record (`calls.to_record`: parse,
   fingerprint) and gathers a batch, posted when it holds `batch_size` records or
   `flush_interval_s` after its first.
3. A batch is posted as gzip-compressed NDJSON to `POST /v1/usage`. On 429, 503,
   any 5xx, a timeout or no connection it is posted again, after a backoff
   doubling from `retry_base_s` to `retry_max_s` with full jitter (or the answer's
   `Retry-After`), for as long as it takes: the service stores a `request_id`
   once, so a batch posted twice is counted once. While it waits, new calls fill
   the queue; what does not fit is dropped and counted, the rest is kept. Any
   other answer (400, 401, 403, 413) will not change on a retry: the batch is
   dropped, counted and logged.
4. `flush()` waits until everything queued before it has been answered;
   `close()` (also run at interpreter exit, bounded by `exit_timeout_s`) flushes
   and stops the thread; what is still unsent when that time is up is counted
   `dropped`, and so is any call submitted after it.

Counts (`stats()`): `queued` calls taken, `sent` records the service accepted,
`duplicates` and `rejected` as it answered (rejected ones it keeps, with their
reason, in `GET /v1/rejected`), `skipped` calls with no usage to record,
`dropped`, `retries`, `errors`.
"""

from __future__ import annotations

import atexit
import contextlib
import gzip
import itertools
import json
import logging
import os
import queue
import random
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from ._version import __version__
from .calls import Call, to_record
from .config import Settings

log = logging.getLogger("cachewatch_client")

#: Answers posted again besides any 5xx (module docstring, step 3).
RETRIED = frozenset({408, 425, 429})


def retried(status: int) -> bool:
    """Whether a batch answered `status` is posted again: it may be answered
    otherwise later (busy, rate limited, a proxy's or the server's 5xx)."""
    return status in RETRIED or status >= 500


@dataclass
class ShipperStats:
    queued: int = 0
    sent: int = 0
    duplicates: int = 0
    rejected: int = 0
    skipped: int = 0
    dropped: int = 0
    retries: int = 0
    errors: int = 0


class _Flush:
    """A marker in the queue: set once everything before it was answered."""

    def __init__(self) -> None:
        self.done = threading.Event()


_STOP = object()


class Shipper:
    """Sends calls' records to one cachewatch (module docstring)."""

    _queue: queue.Queue[Any]

    def __init__(
        self,
        settings: Settings,
        *,
        transport: httpx.BaseTransport | None = None,
        on_record: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.settings = settings
        self._transport = transport
        self._on_record = on_record
        self._stats = ShipperStats()
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self._closing = threading.Event()
        #: Calls queued and not yet settled (sent, counted, dropped): what `close`
        #: counts as dropped when its time is up; then `_abandoned`, and the
        #: thread counts nothing more.
        self._pending = 0
        self._abandoned = False
        self._start_thread()
        _shippers_alive.add(self)
        atexit.register(self.close, settings.exit_timeout_s)

    # -- the application's side -------------------------------------------------

    def submit(self, call: Call) -> bool:
        """Queue `call`; False (and counted) when it was dropped. Never raises."""
        try:
            return self._submit(call)
        except Exception:  # the application's call must not see the client's faults
            self.count(errors=1)
            return False

    def _submit(self, call: Call) -> bool:
        if self.settings.usage_url is None:
            self._warn_once("url", "no CACHEWATCH_URL: calls are counted, not sent")
            self.count(dropped=1)
            return False
        if self._closing.is_set():  # closed: no thread will take it
            self.count(dropped=1)
            return False
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():
                    self._start_thread()
        size = call.size()
        with self._lock:
            if self._held + size > self.settings.max_queue_bytes:
                self._stats.dropped += 1
                return False
            self._held += size
            self._pending += 1
        try:
            self._queue.put_nowait((call, size))
        except queue.Full:
            with self._lock:
                self._held -= size
                self._pending -= 1
                self._stats.dropped += 1
            return False
        self.count(queued=1)
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every call queued so far has been answered; False on timeout."""
        if self.settings.usage_url is None or not self._thread.is_alive():
            return self._queue.empty()
        deadline = _deadline(timeout)
        marker = _Flush()
        try:
            self._queue.put(marker, timeout=timeout)
        except queue.Full:
            return False
        return marker.done.wait(_left(deadline))

    def close(self, timeout: float | None = None) -> None:
        """Flush, bounded by `timeout`, then stop the thread (module docstring)."""
        if self._closing.is_set():
            return
        deadline = _deadline(timeout)
        running = self._pid == os.getpid() and self._thread.is_alive()
        if running:
            self.flush(timeout)
        self._closing.set()  # the thread's retries end: a batch that fails is dropped
        if running:
            with contextlib.suppress(queue.Full):
                self._queue.put(_STOP, timeout=_left(deadline))
            self._thread.join(_left(deadline))
        with self._lock:  # the time is up: what is still unsent is dropped
            self._abandoned = True
            self._stats.dropped += self._pending
            self._pending = 0
        with contextlib.suppress(queue.Empty):
            while True:  # the queue's calls free, and a stop where the thread will see it
                _answer_flushes(self._queue.get_nowait())
        if self._thread.is_alive():
            with contextlib.suppress(queue.Full):
                self._queue.put_nowait(_STOP)

    def stats(self) -> ShipperStats:
        with self._lock:
            return ShipperStats(**asdict(self._stats))

    def count(self, **counts: int) -> None:
        with self._lock:
            for name, n in counts.items():
                setattr(self._stats, name, getattr(self._stats, name) + n)

    def _settle(self, calls: int, **counts: int) -> None:
        """Count the outcome of `calls` queued calls, unless `close` already counted
        them as dropped."""
        with self._lock:
            if self._abandoned:
                return
            self._pending -= calls
            for name, n in counts.items():
                setattr(self._stats, name, getattr(self._stats, name) + n)

    def _after_fork(self) -> None:
        """In a forked child: the parent's threads are gone, and a lock one of them
        held stays held. Fresh locks and queue; `submit` starts the thread."""
        self._lock = threading.Lock()
        self._queue = queue.Queue(self.settings.max_queue)
        self._held = 0
        self._pending = 0

    # -- the thread -------------------------------------------------------------

    def _start_thread(self) -> None:
        self._pid = os.getpid()
        self._held = 0
        self._queue = queue.Queue(self.settings.max_queue)
        self._thread = threading.Thread(target=self._run, name="cachewatch-shipper", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        headers = {"User-Agent": f"cachewatch-client/{__version__}"}
        if self.settings.token:
            headers["Authorization"] = f"Bearer {self.settings.token}"
        with httpx.Client(
            timeout=self.settings.timeout_s, headers=headers, transport=self._transport
        ) as http:
            while True:
                try:
                    self._loop(http)
                    return
                except Exception as error:  # the thread must outlive any fault
                    self._warn_once("thread", f"the shipper's thread recovered: {error!r}")
                    self.count(errors=1)

    def _loop(self, http: httpx.Client) -> None:
        batch: list[str] = []  # the records, as their NDJSON lines
        due = float("inf")
        while True:
            wait = None if not batch else max(0.0, due - time.monotonic())
            try:
                item = self._queue.get(timeout=wait)
            except queue.Empty:
                item = None
            if self._abandoned:
                _answer_flushes(item)
                return
            if item is _STOP:
                self._post(http, batch)
                return
            if isinstance(item, _Flush):
                self._post(http, batch)
                batch = []
                item.done.set()
                continue
            if item is not None:
                if not batch:
                    due = time.monotonic() + self.settings.flush_interval_s
                self._add(batch, *item)
            if len(batch) >= self.settings.batch_size or (batch and time.monotonic() >= due):
                self._post(http, batch)
                batch = []

    def _add(self, batch: list[str], call: Call, size: int) -> None:
        self._release(size)
        try:
            record = to_record(call)
            if record is None:
                self._settle(1, skipped=1)
                return
            # A record JSON cannot carry (a NaN, an object in its attributes) costs
            # that record, not its batch, which the service would refuse whole.
            line = json.dumps(record, separators=(",", ":"), allow_nan=False)
        except Exception as error:
            self._warn_once(type(error).__name__, f"a call could not be recorded: {error!r}")
            self._settle(1, errors=1)
            return
        if self._on_record is not None:
            try:
                self._on_record(record)
            except Exception as error:
                self._warn_once("on_record", f"on_record raised: {error!r}")
                self.count(errors=1)
        batch.append(line)

    def _release(self, size: int) -> None:
        with self._lock:
            self._held -= size

    def _post(self, http: httpx.Client, batch: list[str]) -> None:
        if not batch:
            return
        body = gzip.compress("\n".join(batch).encode(), 5)
        headers = {"Content-Type": "application/x-ndjson", "Content-Encoding": "gzip"}
        for attempt in itertools.count():
            if self._abandoned:  # closed, and counted as dropped
                return
            answer = self._attempt(http, body, headers)
            if isinstance(answer, Exception):  # no retry will post it
                self._settle(len(batch), dropped=len(batch))
                return
            if isinstance(answer, httpx.Response) and not retried(answer.status_code):
                self._answered(answer, len(batch))
                return
            if self._closing.is_set():
                self._settle(len(batch), dropped=len(batch))
                return
            self.count(retries=1)
            self._closing.wait(self._backoff(attempt, answer))

    def _attempt(
        self, http: httpx.Client, body: bytes, headers: dict[str, str]
    ) -> httpx.Response | Exception | None:
        """The answer; None when there was none (retried); the error when the post
        cannot be made at all (an invalid URL: dropped)."""
        assert self.settings.usage_url is not None
        try:
            return http.post(self.settings.usage_url, content=body, headers=headers)
        except httpx.HTTPError as error:
            self._warn_once("connect", f"cachewatch unreachable, retrying: {error!r}")
            return None
        except Exception as error:
            self._warn_once("post", f"a batch cannot be posted, dropped: {error!r}")
            return error

    def _answered(self, answer: httpx.Response, records: int) -> None:
        if answer.status_code != 200:
            self._warn_once(f"http{answer.status_code}", f"cachewatch refused a batch: {answer}")
            self._settle(records, dropped=records)
            return
        try:
            counts = answer.json()
            sent, duplicates, rejected = (
                int(counts.get(name, 0)) for name in ("accepted", "duplicates", "rejected")
            )
        except (ValueError, TypeError, AttributeError) as error:  # not cachewatch's answer
            self._warn_once("answer", f"cachewatch's answer is unreadable: {error!r}")
            self._settle(records, errors=1)
            return
        self._settle(records, sent=sent, duplicates=duplicates, rejected=rejected)

    def _backoff(self, attempt: int, answer: httpx.Response | None) -> float:
        ceiling = min(self.settings.retry_max_s, self.settings.retry_base_s * 2 ** min(attempt, 30))
        after = _retry_after(answer)
        if after is not None:
            return min(self.settings.retry_max_s, after)
        return random.uniform(0, ceiling)

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("cachewatch_client: %s", message)


def _answer_flushes(item: Any) -> None:
    """A flush waiting on `item`, a queued item `close` gave up on, returns."""
    if isinstance(item, _Flush):
        item.done.set()


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


#: Every shipper of the process, for `_after_fork_in_child`.
_shippers_alive: weakref.WeakSet[Shipper] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for shipper in list(_shippers_alive):
        shipper._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _retry_after(answer: httpx.Response | None) -> float | None:
    return None if answer is None else retry_after_s(answer.headers.get("Retry-After"))


def retry_after_s(value: str | None) -> float | None:
    """Retry-After as delta-seconds or an HTTP date; None when absent or bad. The
    one reading of it: the simulator's and the importer's poster use it too."""
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


_shippers: dict[Settings, Shipper] = {}
_shippers_lock = threading.Lock()
_default: list[Shipper] = []


def shipper_for(settings: Settings) -> Shipper:
    """The one shipper of these settings in this process (one thread each)."""
    with _shippers_lock:
        if settings not in _shippers:
            _shippers[settings] = Shipper(settings)
        return _shippers[settings]


def configure(**settings: Any) -> Shipper:
    """Set the process's default shipper: `Settings.resolve`'s arguments."""
    shipper = shipper_for(Settings.resolve(**settings))
    _default[:] = [shipper]
    return shipper


def default_shipper() -> Shipper:
    """The shipper `configure` set, else the one of the environment's settings."""
    return _default[0] if _default else configure()
