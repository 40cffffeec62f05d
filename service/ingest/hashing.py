"""Block and prefix hashes as int64 keys, and the memo that maps them at ingest.

Callers send hashes as ints (Mooncake's `hash_ids`) or strings (hex digests). The
analytics compare them millions of times, so each is mapped once, at ingestion, to
a signed 64-bit key: an int that fits is its own key, anything else is the first 8
bytes of the BLAKE2b digest of its tagged text ("s:" + a string, "i:" + a larger
int), read little-endian. Two different hashes share a key with probability about
n^2 / 2^65, negligible for the working sets seen here (n < 1e9). The keys are
stored, so this mapping may never change (tests/ingest/test_hashing.py holds it to
golden keys).

A stored array of block hashes is the keys packed as little-endian int64, and the
packed form of a key is the digest itself: a string's 8 bytes go into the blob as
BLAKE2b gives them, with no int in between.

The memo. One BLAKE2b call from Python costs about a microsecond, so a long
prompt's 1,000 hex hashes cost a millisecond a record, seven times what storing it
costs. But block hashes recur, across a session's turns and across sessions (that
recurrence is what a prefix cache exploits), so `KeyMemo` keeps the packed keys
of the strings seen lately and packs a record of known hashes with one C-level
`dict.get` over the record and one `bytes.join`; a record whose new blocks come
last (a session's next turn) looks up its known ones the same way and computes
from its first new one on.

It is bounded by two generations of at most `entries` strings each: a miss is
computed and added to the young one; when the young one is full it becomes the old
one (the old one is dropped) and a fresh young one starts; a string found only in
the old one is copied into the young one. Recently used strings so stay, and the
memory is at most 2 x `entries` strings with their keys (docs/deployment.md gives
the figures). A flood of never-repeating hashes would make every hash pay the
memo's lookups and store for nothing: a generation that found few of its hashes
turns the memo off for a while (`KeyMemo`), so the flood costs what BLAKE2b costs.
Threads may share it: a dict's get and store hold the GIL, and a thread still
reading a generation that another replaced reads right keys from it, since a key
never changes.
"""

import struct
from collections.abc import Callable, Sequence
from hashlib import blake2b
from itertools import repeat

from service.settings import Settings

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
#: A block hash's key: an int64, as little-endian bytes.
KEY_BYTES = 8


def key_bytes(value: str | int) -> bytes:
    """A hash's key as 8 little-endian bytes: the definition of the mapping. A
    string's digest is BLAKE2b("s:" + its UTF-8), computed by continuing a copy of
    the state that has read "s:" (`_STRING_TAG`): the same digest, at two thirds of
    the cost of a new hash object each time."""
    if isinstance(value, str):
        digest = _STRING_TAG.copy()
        digest.update(value.encode())
        return digest.digest()
    if isinstance(value, int) and _INT64_MIN <= value <= _INT64_MAX:
        return value.to_bytes(KEY_BYTES, "little", signed=True)
    return blake2b(f"i:{value}".encode(), digest_size=KEY_BYTES).digest()


_STRING_TAG = blake2b(b"s:", digest_size=KEY_BYTES)  # only ever copied, never updated


def hash_key(value: str | int) -> int:
    """A hash's key as a signed 64-bit int (what the analytics compare)."""
    if type(value) is int and _INT64_MIN <= value <= _INT64_MAX:
        return value
    return int.from_bytes(MEMO.key_bytes(value), "little", signed=True)


class KeyMemo:
    """Packed keys of the hashes seen lately: two generations of at most `entries`
    each (the module's docstring). `entries=0` keeps nothing.

    A memo costs each new hash three lookups and a store in dicts too large for
    the CPU's caches, about half a BLAKE2b call; it pays only when most hashes
    recur. So a generation that found fewer than `MIN_HIT_SHARE` of the hashes it
    was asked for is followed by `SKIP_GENERATIONS` generations' worth of hashes
    keyed without it (a flood of new hashes then costs little more than BLAKE2b
    alone), after which it is tried again with what it held."""

    def __init__(self, entries: int) -> None:
        self.entries = entries
        self._young: dict[str | int, bytes] = {}
        self._old: dict[str | int, bytes] = {}
        self._asked = self._found = self._skip = 0

    def key_bytes(self, value: str | int) -> bytes:
        found = self._young.get(value)
        if found is None:
            found = self._old.get(value)
            if found is None:
                found = key_bytes(value)
            self._young[value] = found
            if len(self._young) >= self.entries:
                self._next_generation()
        return found

    def pack(
        self, hashes: Sequence[str | int], accept: Callable[[str | int], bool] | None = None
    ) -> bytes | None:
        """The keys of `hashes` packed as little-endian int64; None when `accept`
        refuses a hash not known (a hash is known only once accepted)."""
        if self._skip > 0:
            self._skip -= len(hashes)
            return _computed(hashes, accept)
        young = self._young
        # A hash not held reads as b"": when the keys joined are all there, every
        # hash was found, with no scan of the list for the missing ones.
        keys = list(map(young.get, hashes, repeat(_MISSING)))
        self._asked += len(keys)
        joined = b"".join(keys)
        if len(joined) == KEY_BYTES * len(keys):
            self._found += len(keys)
            return joined
        old = self._old.get
        computed = 0
        for at in range(keys.index(_MISSING), len(keys)):  # new blocks come last
            if keys[at] is _MISSING:
                value = hashes[at]
                key = old(value)  # (a hash twice in the array is computed twice)
                if key is None:
                    if accept is not None and type(value) is not str and not accept(value):
                        return None
                    key = key_bytes(value)
                    computed += 1
                young[value] = keys[at] = key
        self._found += len(keys) - computed
        if len(young) >= self.entries:
            self._next_generation()
        return b"".join(keys)

    def resize(self, entries: int) -> None:
        """Hold at most `entries` per generation from now on, starting empty."""
        self.entries = entries
        self._young, self._old = {}, {}
        self._asked = self._found = self._skip = 0

    def _next_generation(self) -> None:
        self._old = self._young if self.entries else {}
        self._young = {}
        if self._found < self._asked * MIN_HIT_SHARE:
            self._skip = self.entries * SKIP_GENERATIONS
        self._asked = self._found = 0

    def __len__(self) -> int:
        return len(self._young) + len(self._old)


_MISSING = b""  # no key is empty

# Below this share of hashes found, the memo costs more than it saves (a hit saves
# a BLAKE2b call, ~0.8 us here; a miss costs ~0.4 us of lookups and a store).
MIN_HIT_SHARE = 1 / 3
SKIP_GENERATIONS = 8


def _computed(
    hashes: Sequence[str | int], accept: Callable[[str | int], bool] | None
) -> bytes | None:
    """`KeyMemo.pack` without the memo."""
    if accept is not None:
        for value in hashes:
            if type(value) is not str and not accept(value):
                return None
    return b"".join(map(key_bytes, hashes))


#: The process's memo: the server sizes it, with the memos of whole arrays, from
#: its settings (`Settings.hash_memo_entries`, `service.ingest.array_memos.use_memo`).
MEMO = KeyMemo(Settings.model_fields["hash_memo_entries"].default)


def pack_block_hashes(hashes: Sequence[str | int]) -> bytes:
    """Little-endian int64 array: `numpy.frombuffer(blob, "<i8")` reads it back."""
    try:
        # Fast path for the common all-int64 case (Mooncake-style ids).
        return struct.pack(f"<{len(hashes)}q", *hashes)
    except struct.error:
        packed = MEMO.pack(hashes)
        assert packed is not None  # accepting every hash
        return packed
