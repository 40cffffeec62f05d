"""`fingerprint`: segment hashes, token counts and chained block hashes.

Without a tokenizer a token is `BYTES_PER_TOKEN` bytes of the serialized request
(why, and its limits: the package docstring); with one, blocks are exact token ids
of that serialization. Block hash i covers blocks 0..i. Each segment also gets
its `norm_hash`, the hash of the part with its rendering normalized (`normalize`).

With `prompt_ids`, the token ids a self-hosted engine will prefill (its chat
template applied, then tokenized: llama-server's `/apply-template` and
`/tokenize`, vLLM's `/tokenize` with `messages`), blocks are cut from those ids
instead. Why: an engine's template is not this serialization. ChatML-with-tools
templates (Qwen, Hermes) render the tools *after* the system text, so a
timestamp at the top of the system prompt invalidates the tools too, where the
provider order (tools first) would keep them seen; and the JSON of the
serialization counts more tokens than the template renders, so a block run
longer than the engine's own prompt would claim tokens the engine never had
(`min(prompt_tokens, run * block_size)` then caps it at the whole prompt).
Measured in the lab (docs/lab.md): with the engine's ids the capture ratio of
healthy phases was 1.008-1.013, the ceiling counting whole blocks where llama.cpp
reuses token by token.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, NotRequired, TypedDict

from .canonical import _DIGEST_BYTES, _digest, _Pad, _Piece, _pieces, _utf8
from .normalize import norm_digest
from .parts import _Part, _request_parts

BYTES_PER_TOKEN: Final = 4
DEFAULT_BLOCK_SIZE: Final = 128  # OpenAI caches in 128-token increments
MAX_BLOCKS: Final = 8192  # contract section 1: block_hashes <= 8192
MAX_SEGMENTS: Final = 1024  # cachewatch's ingestion limit on segments
PREFIX_PARTS: Final = frozenset({"tools", "response_format", "system"})

_VERSION: Final = b"cachewatch-fingerprint-v1"

Tokenizer = Callable[[str], Sequence[int]]
"""Text -> token ids, e.g. `tiktoken.get_encoding("o200k_base").encode`."""


class SegmentFields(TypedDict):
    """One part of the request: its name, the hash of its canonical JSON, its tokens,
    and the hash of that JSON with its rendering normalized (`normalize`)."""

    name: str
    hash: str
    tokens: int
    norm_hash: str


class RecordFields(TypedDict):
    """The usage record fields `fingerprint` computes: spread them into a record."""

    segments: list[SegmentFields]
    block_size: int
    block_hashes: list[str]
    prefix_hash: NotRequired[str]
    prefix_tokens: NotRequired[int]


@dataclass(frozen=True)
class _Rendered:
    name: str
    digest: bytes  # of the part's canonical JSON
    pieces: list[_Piece]  # header + canonical JSON + newline, as serialized


def _render(part: _Part) -> _Rendered:
    body = _pieces(part.value)
    hasher = hashlib.blake2b(digest_size=_DIGEST_BYTES, person=b"cw-segment")
    for piece in body:
        if isinstance(piece, str):
            hasher.update(_utf8(piece))
        else:  # a NUL never occurs in JSON text: pads cannot collide with text
            hasher.update(b"\x00" + piece.digest + piece.tokens.to_bytes(4, "little"))
    return _Rendered(part.name, hasher.digest(), [f"{part.name}\n", *body, "\n"])


def _pad_bytes(pad: _Pad) -> bytes:
    size = pad.tokens * BYTES_PER_TOKEN
    return (pad.digest * (size // len(pad.digest) + 1))[:size]


def _approx_units(pieces: Iterable[_Piece]) -> bytes:
    return b"".join(_utf8(p) if isinstance(p, str) else _pad_bytes(p) for p in pieces)


def _token_units(pieces: Iterable[_Piece], tokenizer: Tokenizer) -> list[int]:
    ids: list[int] = []
    for piece in pieces:
        if isinstance(piece, str):
            ids.extend(tokenizer(piece))
        else:  # a negative id no vocabulary uses, distinct per image
            ids.extend([-1 - int.from_bytes(piece.digest[:7], "little")] * piece.tokens)
    return ids


def _approx_tokens(data: bytes) -> int:
    return -(-len(data) // BYTES_PER_TOKEN)


def _byte_blocks(stream: bytes, block_size: int) -> Iterator[bytes]:
    step = block_size * BYTES_PER_TOKEN
    for start in range(0, min(len(stream), step * MAX_BLOCKS), step):
        yield stream[start : start + step]


def _id_blocks(ids: list[int], block_size: int) -> Iterator[bytes]:
    for start in range(0, min(len(ids), block_size * MAX_BLOCKS), block_size):
        block = ids[start : start + block_size]
        yield struct.pack(f"<{len(block)}q", *block)


def _chain(blocks: Iterable[bytes], seed: bytes) -> list[str]:
    """Hash i = H(hash i-1 + block i): equal hash i means equal blocks 0..i."""
    hashes: list[str] = []
    previous = seed
    for block in blocks:
        previous = _digest(previous + block, b"cw-block")
        hashes.append(previous.hex())
    return hashes


def _seed(mode: bytes, block_size: int) -> bytes:
    """Hash -1 of the chain: the version, how blocks are cut, and their size."""
    return _digest(_VERSION + b"|" + mode + b"|" + str(block_size).encode(), b"cw-seed")


def _segment(source: _Part, rendered: _Rendered, tokens: int) -> SegmentFields:
    return {
        "name": rendered.name,
        "hash": rendered.digest.hex(),
        "tokens": tokens,
        "norm_hash": norm_digest(source.value).hex(),
    }


def _prefix_hash(rendered: list[_Rendered]) -> str:
    hasher = hashlib.blake2b(digest_size=_DIGEST_BYTES, person=b"cw-prefix")
    for part in rendered:
        hasher.update(_utf8(part.name) + b"\x00" + part.digest)
    return hasher.hexdigest()


def serialize_request(body: Mapping[str, Any]) -> bytes:
    """The approximate-mode byte stream that blocks are cut from: block i is bytes
    [i, i+1) * block_size * BYTES_PER_TOKEN. Each image stands as its token estimate
    times `BYTES_PER_TOKEN` bytes derived from its digest."""
    return b"".join(_approx_units(_render(p).pieces) for p in _request_parts(body))


def fingerprint(
    body: Mapping[str, Any],
    *,
    tokenizer: Tokenizer | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    prompt_ids: Sequence[int] | None = None,
) -> RecordFields:
    """The fingerprint fields of a usage record for this request body (see the package
    docstring for the serialization and the token approximation). Compute it on the
    exact body you send, after every transformation, and spread the result into the
    record: `{"request_id": ..., **fingerprint(body)}`. With `prompt_ids` (the ids
    the engine prefills, module docstring) the block hashes are of those ids; the
    segments are still the body's parts."""
    if block_size <= 0:
        raise ValueError("block_size must be positive")
    parts = _request_parts(body)
    rendered = [_render(p) for p in parts]
    segments: list[SegmentFields] = []
    stream_bytes: list[bytes] = []
    stream_ids: list[int] = []
    for source, part in zip(parts, rendered, strict=True):
        if tokenizer is None:
            units = _approx_units(part.pieces)
            stream_bytes.append(units)
            tokens = _approx_tokens(units)
        else:
            ids = _token_units(part.pieces, tokenizer)
            stream_ids.extend(ids)
            tokens = len(ids)
        segments.append(_segment(source, part, tokens))
    mode = b"bytes/4" if tokenizer is None else b"tokens"
    blocks: Iterator[bytes]
    if prompt_ids is not None:
        mode, blocks = b"engine-ids", _id_blocks(list(prompt_ids), block_size)
    elif tokenizer is None:
        blocks = _byte_blocks(b"".join(stream_bytes), block_size)
    else:
        blocks = _id_blocks(stream_ids, block_size)
    seed = _seed(mode, block_size)
    fields: RecordFields = {
        "segments": segments[:MAX_SEGMENTS],
        "block_size": block_size,
        "block_hashes": _chain(blocks, seed),
    }
    prefix = [i for i, part in enumerate(rendered) if part.name in PREFIX_PARTS]
    if prefix:
        fields["prefix_hash"] = _prefix_hash([rendered[i] for i in prefix])
        fields["prefix_tokens"] = sum(segments[i]["tokens"] for i in prefix)
    return fields
