"""`Conversation`: the fingerprints of one conversation's successive calls, at the
cost of what each call adds.

A coding agent's session is hundreds of calls, each sending the whole history
again: `fingerprint` on each would render and hash every earlier message again,
a cost that grows with the square of the session's length (300 calls of 5 KB
turns: 4 s). Here each message is rendered once, under a key the caller gives it
(equal keys must mean equal messages: a transcript line's id does), and the
chained block hashes of the bytes the call shares with the previous one are kept:
hash i depends only on blocks 0..i, so only the blocks from the first that
differs are hashed again. The result is exactly `fingerprint({"messages": ...})`
of the same messages (the tests hold it to that).

Messages only (no tools, schema or system part), approximate tokens, default
serialization: what a transcript shows.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

from .blocks import (
    BYTES_PER_TOKEN,
    DEFAULT_BLOCK_SIZE,
    MAX_BLOCKS,
    MAX_SEGMENTS,
    RecordFields,
    SegmentFields,
    _approx_tokens,
    _approx_units,
    _byte_blocks,
    _chain,
    _render,
    _seed,
    _segment,
    fingerprint,
)
from .canonical import _digest
from .parts import _is_system, _normalize_message, _Part


class Conversation:
    """Fingerprints of successive calls whose messages mostly extend each other."""

    def __init__(self, block_size: int = DEFAULT_BLOCK_SIZE, salt: bytes = b"") -> None:
        """`salt`: chain the blocks from a seed of its own, so that equal messages
        in two salted conversations share no block (b"": `fingerprint`'s chain)."""
        if block_size <= 0:
            raise ValueError("block_size must be positive")
        self.block_size = block_size
        self._seed = _seed(b"bytes/4", block_size)
        if salt:
            self._seed = _digest(self._seed + salt, b"cw-salt")
        self._salt = salt
        self._parts: dict[tuple[int, Hashable], tuple[SegmentFields, bytes]] = {}
        self._keys: list[tuple[int, Hashable]] = []
        self._sizes: list[int] = []
        self._hashes: list[str] = []

    def fingerprint(self, messages: Sequence[tuple[Hashable, Any]]) -> RecordFields:
        """`fingerprint({"messages": [m for _, m in messages]})`, each message under
        its key."""
        if messages and _is_system(messages[0][1]):
            if self._salt:
                raise ValueError("a salted conversation cannot start with a system message")
            return fingerprint({"messages": [m for _, m in messages]}, block_size=self.block_size)
        keys = [(i, key) for i, (key, _) in enumerate(messages)]
        rendered = [self._part(i, key, m) for (i, key), (_, m) in zip(keys, messages, strict=True)]
        stream = b"".join(units for _, units in rendered)
        kept = self._shared_blocks(keys)
        step = self.block_size * BYTES_PER_TOKEN
        seed = bytes.fromhex(self._hashes[kept - 1]) if kept else self._seed
        tail = _byte_blocks(stream[kept * step :], self.block_size)
        hashes = (self._hashes[:kept] + _chain(tail, seed))[:MAX_BLOCKS]
        self._keys, self._sizes, self._hashes = keys, [len(u) for _, u in rendered], hashes
        return {
            "segments": [segment for segment, _ in rendered][:MAX_SEGMENTS],
            "block_size": self.block_size,
            "block_hashes": hashes,
        }

    def _part(self, index: int, key: Hashable, message: Any) -> tuple[SegmentFields, bytes]:
        held = self._parts.get((index, key))
        if held is None:
            part = _Part(f"message[{index}]", _normalize_message(message), message)
            shown = _render(part)
            units = _approx_units(shown.pieces)
            held = self._parts[(index, key)] = (_segment(part, shown, _approx_tokens(units)), units)
        return held

    def _shared_blocks(self, keys: list[tuple[int, Hashable]]) -> int:
        """Whole blocks of the previous call's stream that this one starts with: those
        inside the messages both start with (their bytes are equal, so are the
        blocks' hashes). The messages in common are found by bisection over list
        comparisons (C loops), not a Python loop over every message."""
        low, high = 0, min(len(keys), len(self._keys))
        while low < high:
            middle = (low + high + 1) // 2
            if keys[:middle] == self._keys[:middle]:
                low = middle
            else:
                high = middle - 1
        whole = sum(self._sizes[:low]) // (self.block_size * BYTES_PER_TOKEN)
        return min(whole, len(self._hashes))
