"""Prompts as sequences of content pieces, and their chained block hashes.

A prompt is a list of pieces `(cid, tokens)`: `cid` names a piece of content
(a system prompt, one tool, one message) and `tokens` its length. Two prompts
with the same pieces up to token t are equal up to t.

Chained hashes: let S_j be the state after piece j, S_j = G(S_{j-1}, cid_j,
tokens_j), with S_{-1} = 0 and G a 63-bit BLAKE2b of its three inputs. Block i
ends at token e = min((i + 1) * block_size, total); if piece j holds token e - 1
and starts at s_j, the block's hash is G(S_{j-1}, cid_j, e - s_j). It depends
on every piece before e and on nothing after, so equal hash i means an equal
prefix up to the end of block i (the contract's `block_hashes`).

Hashing is incremental: a new prompt is hashed against an earlier one (the
previous turn of the session, or the service's static start), reusing every
full block that lies inside their common leading pieces. A turn that appends
to its history thus costs only its new blocks.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from hashlib import blake2b

Piece = tuple[int, int]  # (content id, tokens)

_PACK3 = struct.Struct("<QQQ").pack
_MASK64 = (1 << 64) - 1


def chain(state: int, cid: int, tokens: int) -> int:
    """G(state, cid, tokens): the 63-bit chained hash (fits a signed int64)."""
    digest = blake2b(_PACK3(state, cid, tokens), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def label_cid(*parts: str | int) -> int:
    """A stable 64-bit content id for a label (never Python's salted hash())."""
    text = "\x1f".join(str(p) for p in parts).encode()
    return int.from_bytes(blake2b(text, digest_size=8).digest(), "little")


def mix64(value: int) -> int:
    """splitmix64's finalizer: a cheap bijective scramble of a 64-bit int."""
    z = (value + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def segment_hash(pieces: Sequence[Piece]) -> str:
    """The hash of one segment's own content (not chained to what precedes it)."""
    state = 0
    for cid, tokens in pieces:
        state = chain(state, cid, tokens)
    return f"{state:016x}"


@dataclass(slots=True)
class Hashed:
    """A hashed prompt: its pieces, the state and end token after each piece,
    and one hash per block (ceil(total / block_size) of them)."""

    pieces: list[Piece]
    states: list[int]
    ends: list[int]
    hashes: list[int]

    @property
    def tokens(self) -> int:
        return self.ends[-1] if self.ends else 0


EMPTY = Hashed([], [], [], [])


def hash_prompt(pieces: list[Piece], block_size: int, base: Hashed = EMPTY) -> Hashed:
    """Hash `pieces` (no zero-token pieces), reusing what `base` shares with it."""
    base_pieces = base.pieces
    n = min(len(base_pieces), len(pieces))
    if n == len(base_pieces) and pieces[:n] == base_pieces:
        common = n  # the usual append-only case, compared in C
    else:
        common = 0
        while common < n and base_pieces[common] == pieces[common]:
            common += 1
    if common:
        states = base.states[:common]
        ends = base.ends[:common]
        start = ends[-1]
        state = states[-1]
    else:
        states, ends, start, state = [], [], 0, 0
    # Full blocks that end inside the common pieces hash the same as in base.
    full = start // block_size
    hashes = base.hashes[:full]
    next_end = (full + 1) * block_size
    for j in range(common, len(pieces)):
        cid, tokens = pieces[j]
        end = start + tokens
        while next_end <= end:
            hashes.append(chain(state, cid, next_end - start))
            next_end += block_size
        state = chain(state, cid, tokens)
        states.append(state)
        ends.append(end)
        start = end
    if start % block_size:
        # The partial last block covers up to the end: its hash is the final state.
        hashes.append(state)
    return Hashed(pieces, states, ends, hashes)
