"""Ids of usage records in ClickHouse, in the layout of Twitter's Snowflake:
milliseconds since the epoch (41 bits), a process salt (10 bits), a counter within
the millisecond (12 bits). They increase with arrival within a process; what reads
them is in service.clickhouse.records.

Why two processes never make one id (issue 33, defect 3: a random salt collided
at 3% per restart of 8 processes). Each process leases its salt from the
relational database every deployment has (table `id_salt_leases`: salt, holder,
generation, expires_us), and every id it makes with a lease is in that lease's
own milliseconds:

* One holder at a time. A salt is taken by inserting its row (the primary key
  refuses a second insert) or, when its lease has expired, by an UPDATE that
  names the row's `generation` as read; every write of the row adds 1 to it, so
  of two racing claims one matches no row. Renewal and release are the same
  compare-and-set, so a process that lost its salt learns it at the next write.
  PostgreSQL re-checks an UPDATE's condition on the row another transaction just
  wrote; SQLite's BEGIN IMMEDIATE runs the writers one at a time.
* Disjoint milliseconds. `expires_us` only grows while a salt is held (claims and
  renewals write max(old, now + lease)), and a holder issues ids only with
  milliseconds below it (`Grant.until_ms`, what it wrote itself). The next
  holder issues from the expiry it replaced on (`Grant.floor_ms`). A release
  writes the holder's next millisecond as the expiry and clears the holder (the
  salt is free at once). So the ids of a salt's successive holders fall in
  successive millisecond ranges, whatever their clocks say: a clock behind or
  ahead only makes a lease end early or late, and a holder whose lease was taken
  keeps to its own range until it learns so.
* A forked child inherits none of it: it claims its own salt.

Leases last `lease_s` (10 minutes) and a daemon thread renews them every
`renew_s` (60 s), so a database that is away for a few minutes costs nothing. A
take that reaches the end of its lease renews (or claims) on the spot; when that
fails too it raises: no id is made without a lease. 1024 live processes per
relational database at most (SaltsExhausted beyond); a crashed one's salt is free
again when its lease ends.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import cast

import numpy as np
from sqlalchemy import Connection, Engine, Table, insert, select, update
from sqlalchemy.exc import IntegrityError

from service.models import IdSaltLease

log = logging.getLogger(__name__)

_SEQ_BITS, _SALT_BITS = 12, 10
_SHIFT = _SEQ_BITS + _SALT_BITS
SALTS = 1 << _SALT_BITS
LEASES = cast(Table, IdSaltLease.__table__)

#: Microseconds since the epoch: the lease's clock and the ids'.
Clock = Callable[[], int]


def wall_clock_us() -> int:
    return time.time_ns() // 1000


def id_floor(t_us: int) -> int:
    """The smallest id a record received at or after `t_us` can have."""
    return (t_us // 1000) << _SHIFT


class SaltsExhausted(RuntimeError):
    """Every salt is leased to a live process (1024 of them)."""


@dataclass(frozen=True)
class Grant:
    """A salt held: ids with it may have milliseconds in [floor_ms, until_ms).
    `generation` is the row's, as this process last wrote it."""

    salt: int
    generation: int
    floor_ms: int
    expires_us: int

    @property
    def until_ms(self) -> int:
        return self.expires_us // 1000


class SaltLease:
    """The database side: claims, renewals and releases of one process's salt
    (module docstring). Each is its own short transaction on `engine`, never the
    caller's: a lease must be committed before an id uses it."""

    def __init__(
        self,
        engine: Engine,
        *,
        lease_s: float = 600.0,
        clock: Clock = wall_clock_us,
        salts: int = SALTS,
    ) -> None:
        self.engine = engine
        self.lease_us = round(lease_s * 1_000_000)
        self.clock = clock
        self.salts = salts
        self.holder = _holder_name()

    def claim(self) -> Grant:
        """The lowest salt that is free (never leased, or its lease ended). Each
        claim lost to a racing process means that one won a salt, so the loop ends."""
        for _ in range(self.salts + 1):
            grant = self._try_claim()
            if grant is not None:
                return grant
        raise SaltsExhausted("no free id salt after as many races as there are salts")

    def _try_claim(self) -> Grant | None:
        try:
            with self.engine.begin() as conn:
                now = self.clock()
                salt, generation, old_expires = self._free_salt(conn, now)
                expires = max(old_expires, now + self.lease_us)
                if generation is None:
                    conn.execute(
                        insert(LEASES).values(
                            salt=salt, holder=self.holder, generation=1, expires_us=expires
                        )
                    )
                elif not self._write(conn, salt, generation, expires):
                    return None
        except IntegrityError:  # another process inserted the same salt first
            return None
        return Grant(salt, (generation or 0) + 1, old_expires // 1000, expires)

    def _free_salt(self, conn: Connection, now: int) -> tuple[int, int | None, int]:
        """(salt, generation or None when it has no row, its expiry) of the lowest
        free salt: never leased, released (no holder: its expiry is past its
        last id, whatever the clocks say) or its lease ended."""
        c = LEASES.c
        rows = conn.execute(select(c.salt, c.generation, c.expires_us, c.holder)).all()
        known = {salt: (generation, expires, holder) for salt, generation, expires, holder in rows}
        for salt in range(self.salts):
            if salt not in known:
                return salt, None, 0
            generation, expires, holder = known[salt]
            if expires <= now or not holder:
                return salt, generation, expires
        raise SaltsExhausted(f"all {self.salts} id salts are leased to live processes")

    def _write(
        self, conn: Connection, salt: int, generation: int, expires: int, holder: str | None = None
    ) -> bool:
        """Compare-and-set: the row is still at `generation`."""
        result = conn.execute(
            update(LEASES)
            .where(LEASES.c.salt == salt, LEASES.c.generation == generation)
            .values(
                generation=generation + 1,
                expires_us=expires,
                holder=self.holder if holder is None else holder,
            )
        )
        return result.rowcount == 1

    def renew(self, grant: Grant) -> Grant | None:
        """The lease extended to now + lease_s; None when another process took it."""
        expires = max(grant.expires_us, self.clock() + self.lease_us)
        with self.engine.begin() as conn:
            if not self._write(conn, grant.salt, grant.generation, expires):
                return None
        return replace(grant, generation=grant.generation + 1, expires_us=expires)

    def release(self, grant: Grant, next_ms: int) -> None:
        """Free the salt for the next process, whose ids start at `next_ms` (above
        every id made with it here)."""
        expires = max(next_ms, grant.floor_ms) * 1000
        with self.engine.begin() as conn:
            self._write(conn, grant.salt, grant.generation, expires, holder="")


def _holder_name() -> str:
    """Who holds a salt, for whoever reads the table; never compared."""
    return f"{socket.gethostname()[:120]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


#: Every IdSource of the process: a forked child forgets their leases.
_SOURCES: weakref.WeakSet[IdSource] = weakref.WeakSet()


class IdSource:
    """Snowflake-style ids for one process, with a leased salt (module
    docstring). Thread-safe: `_lock` orders the ids, `_lease_lock` the lease's
    writes (taken inside `_lock`, never the other way round); a take reads the
    current grant without waiting for a renewal, since any grant is good for its
    own milliseconds."""

    def __init__(self, lease: SaltLease, *, renew_s: float | None = 60.0) -> None:
        self.lease = lease
        self.renew_s = renew_s
        self._reset()
        _SOURCES.add(self)

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._lease_lock = threading.Lock()
        self._grant: Grant | None = None
        self._salt: int | None = None  # of the last ids made
        self._ms = 0
        self._seq = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def salt(self) -> int | None:
        """The salt held now (None: none yet)."""
        grant = self._grant
        return None if grant is None else grant.salt

    def start(self) -> None:
        """Claim a salt now (an API process at startup, so that no request waits
        for it) and keep it renewed; a failure is logged and left to the renewals
        and the first take."""
        try:
            self._refreshed(0)
        except Exception as exc:  # the database may come later
            log.warning("no id salt claimed at startup: %s", exc)
        self._start_renewals()

    def ready(self) -> None:
        """Hold a salt now: what a caller about to take locks of its own does, so
        that a claim (a transaction of its own) does not wait for them."""
        self._refreshed(self.lease.clock() // 1000)

    def take(self, n: int, now_us: int | None = None) -> np.ndarray:
        """`n` increasing ids, received now."""
        now_ms = (self.lease.clock() if now_us is None else now_us) // 1000
        out = np.empty(n, dtype=np.int64)
        with self._lock:
            if now_ms > self._ms:
                self._ms, self._seq = now_ms, 0
            grant = self._grant_for(n)
            salt_bits = grant.salt << _SEQ_BITS
            for i in range(n):
                if self._seq == 1 << _SEQ_BITS:
                    self._ms, self._seq = self._ms + 1, 0
                out[i] = (self._ms << _SHIFT) | salt_bits | self._seq
                self._seq += 1
        return out

    def _grant_for(self, n: int) -> Grant:
        """A grant whose milliseconds hold the next `n` ids, `_ms` moved into its
        range (and past the last id when the salt changed: ids keep increasing)."""
        grant = self._grant
        if grant is None or self._last_ms(n) >= grant.until_ms:
            grant = self._refreshed(self._last_ms(n))
        if grant.salt != self._salt or self._ms < grant.floor_ms:
            if self._salt is not None and self._seq:  # ids of the old salt this ms
                self._ms += 1
            self._ms, self._seq = max(self._ms, grant.floor_ms), 0
            self._salt = grant.salt
        if self._last_ms(n) >= grant.until_ms:
            raise SaltsExhausted(f"{n} ids do not fit in the lease of salt {grant.salt}")
        return grant

    def _last_ms(self, n: int) -> int:
        return self._ms + ((self._seq + n - 1) >> _SEQ_BITS)

    def _refreshed(self, needed_ms: int) -> Grant:
        """A grant that reaches past `needed_ms`: the current one, renewed, or a
        new salt when it was lost (or there was none)."""
        with self._lease_lock:
            grant = self._grant
            if grant is not None and needed_ms < grant.until_ms:
                return grant
            renewed = None if grant is None else self.lease.renew(grant)
            if renewed is None:
                if grant is not None:
                    log.warning("id salt %d was taken over: claiming another", grant.salt)
                self._grant = None
                renewed = self.lease.claim()
            self._grant = renewed
        self._start_renewals()
        return renewed

    def renew_now(self) -> None:
        """What the renewal thread does each `renew_s`: extend the lease, or claim
        a salt when it was lost or none is held."""
        self._refreshed(2**62)  # every grant ends before: renew it

    def _start_renewals(self) -> None:
        if self.renew_s is None or self._thread is not None or self._stop.is_set():
            return
        with self._lease_lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._renewals,
                    args=(self.renew_s, self._stop),
                    name="cachewatch-id-salt",
                    daemon=True,
                )
                self._thread.start()

    def _renewals(self, renew_s: float, stop: threading.Event) -> None:
        """Every `renew_s`; after a failure again in 5 s, then 10, 20, ... up to
        `renew_s` (a lease outlasts several)."""
        failures = 0
        while not stop.wait(min(renew_s, 5.0 * 2 ** (failures - 1)) if failures else renew_s):
            try:
                self.renew_now()
                failures = 0
            except Exception as exc:  # retried; takes renew on their own
                failures += 1
                log.warning("id salt lease not renewed: %s", exc)

    def release(self) -> None:
        """Stop renewing and free the salt (an API process at shutdown). A take
        after this claims again."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(10)
        self._stop = threading.Event()
        with self._lock, self._lease_lock:
            grant, self._grant = self._grant, None
            if grant is not None:
                try:
                    self.lease.release(grant, self._ms + 1)
                except Exception as exc:  # its lease ends on its own
                    log.warning("id salt %d not released: %s", grant.salt, exc)


def _forget_leases_in_child() -> None:
    """A forked child must not use its parent's salt (nor its locks, which another
    thread may have held at the fork): it claims its own on its first take."""
    for source in list(_SOURCES):
        source._reset()
        source.lease.holder = _holder_name()
        source.lease.engine.dispose(close=False)


os.register_at_fork(after_in_child=_forget_leases_in_child)
