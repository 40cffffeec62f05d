"""Block and prefix hashes as int64 keys.

Callers send hashes as ints (Mooncake's `hash_ids`) or strings (hex digests). The
analytics compare them millions of times, so each is mapped once, at ingestion, to
a signed 64-bit key: an int that fits is its own key, anything else is the first 8
bytes of its BLAKE2b digest. Two different hashes share a key with probability
about n^2 / 2^65, negligible for the working sets seen here (n < 1e9)."""

import hashlib
import struct
from collections.abc import Sequence

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def hash_key(value: str | int) -> int:
    if isinstance(value, int) and _INT64_MIN <= value <= _INT64_MAX:
        return value
    tagged = (f"i:{value}" if isinstance(value, int) else f"s:{value}").encode()
    return int.from_bytes(hashlib.blake2b(tagged, digest_size=8).digest(), "little", signed=True)


def pack_block_hashes(hashes: Sequence[str | int]) -> bytes:
    """Little-endian int64 array: `numpy.frombuffer(blob, "<i8")` reads it back."""
    layout = f"<{len(hashes)}q"
    try:
        # Fast path for the common all-int64 case (Mooncake-style ids).
        return struct.pack(layout, *hashes)
    except struct.error:
        return struct.pack(layout, *[hash_key(h) for h in hashes])
