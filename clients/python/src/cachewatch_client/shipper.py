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
   `dropped`.

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
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import httpx

from ._version import __version__
from .calls import Call, to_record
from .config import Settings

log = logging.getLogger("cachewatch_client")

RETRIED = frozenset({408, 425, 429, 500, 502, 503, 504})


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
        self._start_thread()
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
        if self._pid != os.getpid():
            self._start_thread()
        size = call.size()
        with self._lock:
            if self._held + size > self.settings.max_queue_bytes:
                self._stats.dropped += 1
                return False
            self._held += size
        try:
            self._queue.put_nowait((call, size))
        except queue.Full:
            self._release(size)
            self.count(dropped=1)
            return False
        self.count(queued=1)
        return True

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every call queued so far has been answered; False on timeout."""
        if self.settings.usage_url is None or not self._thread.is_alive():
            return self._queue.empty()
        marker = _Flush()
        try:
            self._queue.put(marker, timeout=timeout)
        except queue.Full:
            return False
        return marker.done.wait(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Flush, bounded by `timeout`, then stop the thread (module docstring)."""
        if self._closing.is_set():
            return
        self.flush(timeout)
        self._closing.set()
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(_STOP)
        self._thread.join(1.0)

    def stats(self) -> ShipperStats:
        with self._lock:
            return ShipperStats(**asdict(self._stats))

    def count(self, **counts: int) -> None:
        with self._lock:
            for name, n in counts.items():
                setattr(self._stats, name, getattr(self._stats, name) + n)

    # -- the thread -------------------------------------------------------------

    def _start_thread(self) -> None:
        self._pid = os.getpid()
        self._held = 0
        self._queue: queue.Queue[Any] = queue.Queue(self.settings.max_queue)
        self._thread = threading.Thread(target=self._run, name="cachewatch-shipper", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        headers = {"User-Agent": f"cachewatch-client/{__version__}"}
        if self.settings.token:
            headers["Authorization"] = f"Bearer {self.settings.token}"
        with httpx.Client(
            timeout=self.settings.timeout_s, headers=headers, transport=self._transport
        ) as http:
            self._loop(http)

    def _loop(self, http: httpx.Client) -> None:
        batch: list[dict[str, Any]] = []
        due = float("inf")
        while True:
            wait = None if not batch else max(0.0, due - time.monotonic())
            try:
                item = self._queue.get(timeout=wait)
            except queue.Empty:
                item = None
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

    def _add(self, batch: list[dict[str, Any]], call: Call, size: int) -> None:
        self._release(size)
        try:
            record = to_record(call)
        except Exception as error:
            self._warn_once(type(error).__name__, f"a call could not be recorded: {error!r}")
            self.count(errors=1)
            return
        if record is None:
            self.count(skipped=1)
            return
        if self._on_record is not None:
            self._on_record(record)
        batch.append(record)

    def _release(self, size: int) -> None:
        with self._lock:
            self._held -= size

    def _post(self, http: httpx.Client, batch: list[dict[str, Any]]) -> None:
        if not batch:
            return
        body = gzip.compress(
            "\n".join(json.dumps(r, separators=(",", ":")) for r in batch).encode(), 5
        )
        headers = {"Content-Type": "application/x-ndjson", "Content-Encoding": "gzip"}
        for attempt in itertools.count():
            answer = self._attempt(http, body, headers)
            if isinstance(answer, httpx.Response) and answer.status_code not in RETRIED:
                self._answered(answer, len(batch))
                return
            if self._closing.is_set():
                self.count(dropped=len(batch))
                return
            self.count(retries=1)
            self._closing.wait(self._backoff(attempt, answer))

    def _attempt(
        self, http: httpx.Client, body: bytes, headers: dict[str, str]
    ) -> httpx.Response | None:
        assert self.settings.usage_url is not None
        try:
            return http.post(self.settings.usage_url, content=body, headers=headers)
        except httpx.HTTPError as error:
            self._warn_once("connect", f"cachewatch unreachable, retrying: {error!r}")
            return None

    def _answered(self, answer: httpx.Response, records: int) -> None:
        if answer.status_code != 200:
            self._warn_once(f"http{answer.status_code}", f"cachewatch refused a batch: {answer}")
            self.count(dropped=records)
            return
        counts = answer.json()
        self.count(
            sent=int(counts.get("accepted", 0)),
            duplicates=int(counts.get("duplicates", 0)),
            rejected=int(counts.get("rejected", 0)),
        )

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


def _retry_after(answer: httpx.Response | None) -> float | None:
    if answer is None:
        return None
    try:
        return max(0.0, float(answer.headers.get("Retry-After", "")))
    except ValueError:
        return None


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
