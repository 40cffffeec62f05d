"""Caches of the dashboard's answers, per process (one per app).

`ResultCache`: data-request answers keyed by the view and the data version (the
newest record id, event id and regression update: rollups only change when
records arrive), so a refresh, a second viewer or returning to a view costs a few
indexed lookups instead of re-reading a month of rollups.

`ReplayCache`: capacity replays off the request path.

A replay's cost grows with the requests it replays (`service.analytics.capacity`),
so even the bounded sample the dashboard replays can take longer than a data
request may. The request loads the sample (its own session, its own thread),
hands the pure NumPy replay to one background thread and waits a little; a replay
that is not done by then is answered "pending" and the page asks again. Results are kept per sample
(model, range, sizes and the newest record id), so refreshes and returning to a
view cost nothing. No database access happens off the request thread."""

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

Result = dict[str, Any]


class _Recent:
    """Values by key, each kept `ttl_s` and the least recently used dropped beyond
    `max_entries`. Not locked: its owner holds its own lock around every call."""

    def __init__(self, max_entries: int, ttl_s: float) -> None:
        self._entries: OrderedDict[Hashable, tuple[float, Any]] = OrderedDict()
        self._max_entries = max_entries
        self._ttl_s = ttl_s

    def get(self, key: Hashable) -> Any | None:
        entry = self._entries.get(key)
        if entry is None or time.monotonic() - entry[0] > self._ttl_s:
            return None
        self._entries.move_to_end(key)
        return entry[1]

    def put(self, key: Hashable, value: Any) -> None:
        self._entries[key] = (time.monotonic(), value)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)


class ReplayCache:
    def __init__(self, max_entries: int = 32, ttl_s: float = 600.0) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="capacity")
        self._lock = threading.Lock()
        self._done = _Recent(max_entries, ttl_s)
        self._running: dict[Hashable, Future[Result]] = {}

    def cached(self, key: Hashable) -> Result | None:
        with self._lock:
            result: Result | None = self._done.get(key)
            return result

    def running(self, key: Hashable) -> bool:
        with self._lock:
            return key in self._running

    def submit(self, key: Hashable, job: Callable[[], Result]) -> None:
        """Start the job unless it is running already."""
        with self._lock:
            if key in self._running:
                return
            future = self._executor.submit(job)
            self._running[key] = future
        future.add_done_callback(lambda done: self._finish(key, done))

    def wait(self, key: Hashable, timeout_s: float) -> Result | None:
        """The result if the job ends within `timeout_s`, else None (still running)."""
        with self._lock:
            future = self._running.get(key)
        if future is None:
            return self.cached(key)
        try:
            return future.result(timeout=timeout_s)
        except FutureTimeout:
            return None

    def _finish(self, key: Hashable, future: Future[Result]) -> None:
        with self._lock:
            self._running.pop(key, None)
            if future.exception() is None:
                self._done.put(key, future.result())


class ResultCache:
    def __init__(self, max_entries: int = 64, ttl_s: float = 300.0) -> None:
        self._lock = threading.Lock()
        self._entries = _Recent(max_entries, ttl_s)

    def get(self, key: Hashable) -> bytes | None:
        with self._lock:
            body: bytes | None = self._entries.get(key)
            return body

    def put(self, key: Hashable, value: bytes) -> None:
        with self._lock:
            self._entries.put(key, value)
