"""Ids of usage records in ClickHouse, in the layout of Twitter's Snowflake:
milliseconds since the epoch (41 bits), a process salt (10 bits), a counter within
the millisecond (12 bits). See service.clickhouse.records for what reads them."""

from __future__ import annotations

import random
import threading
import time

import numpy as np

_SEQ_BITS, _SALT_BITS = 12, 10
_SHIFT = _SEQ_BITS + _SALT_BITS


def id_floor(t_us: int) -> int:
    """The smallest id a record received at or after `t_us` can have."""
    return (t_us // 1000) << _SHIFT


class IdSource:
    """Snowflake-style ids for one process (module docstring). Thread-safe."""

    def __init__(self, salt: int | None = None) -> None:
        self._salt = random.getrandbits(_SALT_BITS) if salt is None else salt
        self._lock = threading.Lock()
        self._ms = 0
        self._seq = 0

    def take(self, n: int, now_us: int | None = None) -> np.ndarray:
        """`n` increasing ids, received now."""
        now_ms = (time.time_ns() // 1000 if now_us is None else now_us) // 1000
        out = np.empty(n, dtype=np.int64)
        with self._lock:
            if now_ms > self._ms:
                self._ms, self._seq = now_ms, 0
            for i in range(n):
                if self._seq == 1 << _SEQ_BITS:
                    self._ms, self._seq = self._ms + 1, 0
                out[i] = (self._ms << _SHIFT) | (self._salt << _SEQ_BITS) | self._seq
                self._seq += 1
        return out


IDS = IdSource()
