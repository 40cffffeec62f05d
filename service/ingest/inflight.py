"""Bytes in flight: one budget per process for the memory that request bodies and
their decoding hold at once (`CACHEWATCH_MAX_INFLIGHT_BYTES`).

A body costs more than its size. Inflated, it is up to 64 MiB from 10 MiB sent;
decoded, each record becomes Python objects and a row kept until the insert ends.
`bench/body_memory.py --case shapes` prints the peak RSS growth per decoded byte of
each shape of body (once, on SQLite: 2.9x for invalid records, 6.0x for valid NDJSON
of usual records, 10.7x for NDJSON of the smallest valid records and 11.1x for a
gzip JSON array of them, 13.3x for OTLP JSON, 31x for `[[],[],...]`), beside what
this module charges it.

So each request that reads a body holds a `Reservation` on its process's `Budget`,
charged as the memory is taken:

- the body as sent, as it is read (`service.api.deps.read_bounded_body`);
- its decoding, `DECODE_FACTOR` bytes per decoded byte: for a body that is not gzip
  once it has been read; for a gzip body once its inflated size is known, before
  more than 1 MiB of it is kept, together with the inflated bytes themselves
  (`charge_inflated`, asked by `body.decompress`, which counts a larger body's
  bytes in a first pass that keeps none: a gzip bomb is refused without being held);
- what dense JSON takes beyond that, estimated from its separators, before a body
  is decoded into Python values (`charge_json_values`).

A charge the budget cannot take raises `Busy`: the request is answered 503 with
Retry-After and the shipper sends it again later. Requests are not queued: a
waiting request would hold its body, and a queue of them is the unbounded memory
this avoids. A request whose charges alone would pass the whole budget can never
be served: `BodyTooLarge` (413). Settings make sure that no body of records within
the size limits is one (`Settings.max_inflight_bytes`). Everything a request holds is given
back when it ends, however it ends.
"""

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from service.ingest.body import BodyTooLarge

# Bytes of memory charged per decoded byte: with the body's own bytes (as sent, or as
# inflated) 11x, what the heaviest records measured (the module docstring).
DECODE_FACTOR = 10

MiB = 1024 * 1024


class Busy(Exception):
    """Bodies in flight hold the whole budget: answer 503 with Retry-After."""


class Budget:
    """The bytes that the process's requests may hold at once. Charged from the
    event loop (reading bodies) and from worker threads (decoding them)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.held = 0
        self._lock = threading.Lock()

    def take(self, n: int) -> bool:
        with self._lock:
            if self.held + n > self.capacity:
                return False
            self.held += n
            return True

    def give_back(self, n: int) -> None:
        with self._lock:
            self.held -= n


class Reservation:
    """What one request holds of the budget: it grows with each charge and is given
    back whole at the request's end (`reserving`). The services that decode a body
    take it as an argument and charge it as they go."""

    def __init__(self, budget: Budget) -> None:
        self.budget = budget
        self.held = 0

    def charge(self, n: int) -> None:
        if n <= 0:
            return
        wanted = self.held + n
        if wanted > self.budget.capacity:
            raise BodyTooLarge(
                f"decoding this body takes about {wanted // MiB} MiB of memory, more than "
                f"the {self.budget.capacity // MiB} MiB allowed for all bodies in flight "
                "(CACHEWATCH_MAX_INFLIGHT_BYTES)"
            )
        if not self.budget.take(n):
            raise Busy(
                f"the server holds {self.budget.held // MiB} MiB of request bodies, "
                f"its limit is {self.budget.capacity // MiB} MiB; retry later"
            )
        self.held = wanted

    def charge_decoding(self, decoded: int) -> None:
        """Decoding `decoded` bytes of body."""
        self.charge(DECODE_FACTOR * decoded)

    def charge_inflated(self, inflated: int) -> None:
        """A gzip body of `inflated` bytes is about to be inflated: the bytes
        themselves and their decoding (`body.decompress`'s `admit`)."""
        self.charge((1 + DECODE_FACTOR) * inflated)

    def charge_json_values(self, text: bytes, trees: int = 1) -> None:
        """Before `text` is decoded into Python values (`trees` copies of them held
        at once): what its separators say that takes beyond the `DECODE_FACTOR` per
        byte already charged, which is nothing for records of usual shapes."""
        self.charge(trees * json_values_cost(text) - DECODE_FACTOR * len(text))

    def release(self) -> None:
        self.budget.give_back(self.held)
        self.held = 0


class Unmetered(Reservation):
    """What a body decoded outside a request is charged to: nothing (the CLI, the
    simulator, tests of the services). Counting dense JSON is skipped: it is not free."""

    def __init__(self) -> None:
        super().__init__(Budget(0))

    def charge(self, n: int) -> None:
        pass

    def charge_json_values(self, text: bytes, trees: int = 1) -> None:
        pass


UNMETERED = Unmetered()


@contextmanager
def reserving(budget: Budget) -> Iterator[Reservation]:
    """A request's reservation on `budget`, given back on leaving."""
    reservation = Reservation(budget)
    try:
        yield reservation
    finally:
        reservation.release()


def most_one_body_holds(max_body_bytes: int, max_decompressed_bytes: int) -> int:
    """The charges of a body at both size limits: sent, inflated and decoded, or
    sent and decoded as it is."""
    inflated = max_body_bytes + (1 + DECODE_FACTOR) * max_decompressed_bytes
    return max(inflated, (1 + DECODE_FACTOR) * max_body_bytes)


# What orjson and validation take per JSON separator of a text decoded into Python
# values, at most: a value after a comma, a container, a member after a colon. Chosen
# so that the estimate stays above what dense JSON measures (`bench/body_memory.py
# --case shapes` prints both) and at or under DECODE_FACTOR for records.
_PER_COMMA, _PER_CONTAINER, _PER_COLON = 32, 96, 100


def json_values_cost(text: bytes) -> int:
    """An upper estimate of the memory that decoding `text` as JSON into Python
    values and validating them takes, from its separators: dense JSON (`[[],[],...]`)
    takes several times `DECODE_FACTOR` a byte. One pass per separator."""
    containers = text.count(b"{") + text.count(b"[")
    return (
        _PER_COMMA * text.count(b",") + _PER_CONTAINER * containers + _PER_COLON * text.count(b":")
    )
