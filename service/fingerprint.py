"""Prefix fingerprints of chat requests, and why two requests stop sharing a prefix.

This module uses the standard library only, so that an application can copy this
one file next to its own code (or import `service.fingerprint` when cachewatch is
installed) without pulling in the server's dependencies.

`fingerprint(body)` turns an OpenAI or Anthropic chat request body into the usage
record fields of contract section 1: `segments`, `prefix_hash`/`prefix_tokens` and
`block_size`/`block_hashes`. `explain_divergence(a, b)` tells where two requests
stop sharing a prefix and, when it recognises one, which anti-pattern did it.

How a request is serialized
---------------------------
A request is split into *parts*, in the order the provider renders them:
`tools`, `response_format` (the output schema), `system`, then `message[0]`,
`message[1]`, ... (the conversation after the system messages; so the OpenAI and
Anthropic forms of one conversation name the same parts). Each part is written as
canonical JSON: keys sorted, fixed separators, UTF-8, so the same request gives the
same bytes whatever the dict key order, process or `PYTHONHASHSEED` (no `hash()`
anywhere: hashes are BLAKE2b). Lists keep their order: a reordered tools list
renders a different prompt, so it must fingerprint differently. The price of
sorting keys: JSON differing only in key order fingerprints alike, although the
provider, which renders schemas in the order sent, may see other tokens;
`explain_divergence` compares the JSON as sent too and reports it (`reordered_keys`).

Canonical also means that representations the provider renders identically are
written identically: string content equals one text block, and Anthropic's
`cache_control` markers are dropped (they say where to write the cache, they are no
prompt text). Binary payloads (a `data:` URL, any string of over 256 base64
characters) are replaced by their SHA-256, so a 2 MB image does not count as 500k
tokens. The Responses API form (`instructions`, `input`, `text.format`) and the
legacy `functions` list are read as system, messages, schema and tools. What is
*not* hashed: the model name (records carry it, and reuse is scoped by it), and
sampling or routing options (`temperature`, `tool_choice`, `metadata`...).

The serialized request is the concatenation, for each part, of its name, a newline,
its canonical JSON and a newline (`serialize_request`).

Tokens, approximately
---------------------
Without a tokenizer, a token is approximated as `BYTES_PER_TOKEN` = 4 bytes of that
UTF-8 serialization, and a block is `block_size` such tokens (4 * block_size
bytes). Why bytes, not characters: English prose and JSON run at 3-4.5 bytes per
token in current tokenizers, and counting bytes keeps CJK text (3 bytes a
character, 1-2 tokens a character) within 2x, where counting characters would be
off by 4-6x. Limits: counts are typically within +-25% for English and JSON; the
JSON punctuation and the part headers add a little that the provider's chat
template replaces by its own few tokens; block boundaries do not fall on real token
boundaries, so `cacheable_tokens` derived from them is approximate too. An image
counts `IMAGE_TOKENS_LOW` tokens at `detail: "low"` and `IMAGE_TOKENS` otherwise
(OpenAI's figures for a low and a 1024x1024 high-detail image; Anthropic's are of
the same order); other binary payloads (audio, PDF) count only their digest.

Pass `tokenizer` (text -> token ids) for exact counts: each part's text is then
tokenized on its own (a change in one part never re-tokenizes an earlier one) and
blocks are exactly `block_size` token ids of that serialization. They are still
tokens of this serialization, not of the provider's chat template.

`block_hashes` are chained: hash i covers blocks 0..i (the hash of hash i-1 and
block i), so equal hash i means an equal prefix up to the end of block i. The last
block may be partial (as in Mooncake's `hash_ids`), so a request shorter than one
block still gets a fingerprint. At most `MAX_BLOCKS` blocks and `MAX_SEGMENTS`
segments are returned (the ingestion limits): the start of a prompt is what matters.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, Final, NotRequired, TypedDict
from urllib.parse import urlsplit

__all__ = [
    "BYTES_PER_TOKEN",
    "DEFAULT_BLOCK_SIZE",
    "IMAGE_TOKENS",
    "IMAGE_TOKENS_LOW",
    "MAX_BLOCKS",
    "MAX_SEGMENTS",
    "PREFIX_PARTS",
    "Divergence",
    "Hint",
    "HintCode",
    "RecordFields",
    "SegmentFields",
    "Tokenizer",
    "canonical_json",
    "explain_divergence",
    "fingerprint",
    "part_names",
    "serialize_request",
]

BYTES_PER_TOKEN: Final = 4
DEFAULT_BLOCK_SIZE: Final = 128  # OpenAI caches in 128-token increments
IMAGE_TOKENS_LOW: Final = 85
IMAGE_TOKENS: Final = 765
MAX_BLOCKS: Final = 8192  # contract section 1: block_hashes <= 8192
MAX_SEGMENTS: Final = 1024  # cachewatch's ingestion limit on segments
PREFIX_PARTS: Final = frozenset({"tools", "response_format", "system"})

_DIGEST_BYTES: Final = 8  # cachewatch keys hashes on 64 bits anyway (service.ingest.hashing)
_VERSION: Final = b"cachewatch-fingerprint-v1"
_SHORTEN_OVER: Final = 256  # binary payloads longer than this are replaced by a digest
_BASE64 = re.compile(r"[A-Za-z0-9+/=_\-\r\n]+")
_DATA_URL = re.compile(r"data:([^;,]{0,100})(;[^,]{0,100})?,")
_IMAGE_TYPES: Final = frozenset({"image_url", "input_image", "image"})

Tokenizer = Callable[[str], Sequence[int]]
"""Text -> token ids, e.g. `tiktoken.get_encoding("o200k_base").encode`."""


class SegmentFields(TypedDict):
    """One part of the request: its name, the hash of its canonical JSON, its tokens."""

    name: str
    hash: str
    tokens: int


class RecordFields(TypedDict):
    """The usage record fields `fingerprint` computes: spread them into a record."""

    segments: list[SegmentFields]
    block_size: int
    block_hashes: list[str]
    prefix_hash: NotRequired[str]
    prefix_tokens: NotRequired[int]


# --------------------------------------------------------------------------- parts


@dataclass(frozen=True)
class _Part:
    """One part of a request: `value` is what is hashed, `raw` what was sent."""

    name: str
    value: Any
    raw: Any


def _request_parts(body: Mapping[str, Any]) -> list[_Part]:
    """The parts of a request in the order the provider renders them."""
    if not isinstance(body, Mapping):
        raise TypeError(f"a request body must be a JSON object, not {type(body).__name__}")
    parts: list[_Part] = []
    tools = body.get("tools") or body.get("functions")
    if tools:
        parts.append(_Part("tools", [_without_cache_control(t) for t in tools], tools))
    schema = _schema(body)
    if schema is not None:
        parts.append(_Part("response_format", schema, schema))
    leading, conversation = _split_system(_messages(body))
    system = _system_part(body, leading)
    if system is not None:
        parts.append(system)
    parts.extend(
        _Part(f"message[{i}]", _normalize_message(m), m) for i, m in enumerate(conversation)
    )
    return parts


def part_names(body: Mapping[str, Any]) -> list[str]:
    """The part (segment) names of a request, in rendering order."""
    return [part.name for part in _request_parts(body)]


def _schema(body: Mapping[str, Any]) -> Any:
    """The output schema: Chat `response_format`, Responses `text.format`, or
    Anthropic's `output_format` / `output_config.format`."""
    text, config = body.get("text"), body.get("output_config")
    candidates = (
        body.get("response_format"),
        text.get("format") if isinstance(text, Mapping) else None,
        body.get("output_format"),
        config.get("format") if isinstance(config, Mapping) else None,
    )
    return next((c for c in candidates if c is not None), None)


def _messages(body: Mapping[str, Any]) -> list[Any]:
    """Chat `messages`, or the Responses API's `input` (a string is one user turn)."""
    messages = body.get("messages", body.get("input"))
    if messages is None:
        return []
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    if not isinstance(messages, list | tuple):
        raise TypeError("`messages` must be a list")
    return list(messages)


def _is_system(message: Any) -> bool:
    return isinstance(message, Mapping) and message.get("role") in ("system", "developer")


def _split_system(messages: list[Any]) -> tuple[list[Any], list[Any]]:
    """The leading system/developer messages, and the conversation after them. A
    system message later in the conversation stays where it is: it is rendered there."""
    n = 0
    while n < len(messages) and _is_system(messages[n]):
        n += 1
    return messages[:n], messages[n:]


def _system_part(body: Mapping[str, Any], leading: list[Any]) -> _Part | None:
    """Anthropic's `system` or the Responses API's `instructions`, then the leading
    system messages: one `system` part, as a list of messages in both forms."""
    value: list[Any] = []
    raw: list[Any] = []
    for top in (body.get("system"), body.get("instructions")):
        if top is not None and top != "" and top != []:
            value.append({"role": "system", "content": _content_blocks(top)})
            raw.append(top)
    value.extend(_normalize_message(m) for m in leading)
    raw.extend(leading)
    return _Part("system", value, raw) if value else None


def _without_cache_control(item: Any) -> Any:
    if isinstance(item, Mapping) and "cache_control" in item:
        return {k: v for k, v in item.items() if k != "cache_control"}
    return item


def _content_blocks(content: Any) -> Any:
    """String content as the one text block it is rendered as; blocks without
    `cache_control`."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return [
            {"type": "text", "text": b} if isinstance(b, str) else _without_cache_control(b)
            for b in content
        ]
    return content


def _normalize_message(message: Any) -> Any:
    if not isinstance(message, Mapping):
        return message
    out = dict(_without_cache_control(message))
    if "content" in out:
        out["content"] = _content_blocks(out["content"])
    return out


# ------------------------------------------------------------------ canonical JSON


@dataclass(frozen=True)
class _Pad:
    """Non-text content (an image) standing for `tokens` tokens in the block stream."""

    digest: bytes
    tokens: int


_Piece = str | _Pad


def _digest(data: bytes, person: bytes = b"", size: int = _DIGEST_BYTES) -> bytes:
    return hashlib.blake2b(data, digest_size=size, person=person).digest()


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _shorten(text: str) -> str:
    """A binary payload as its SHA-256: same identity, a few tokens instead of many."""
    if len(text) <= _SHORTEN_OVER:
        return text
    url = _DATA_URL.match(text)
    if url is None and _BASE64.fullmatch(text) is None:
        return text
    sha = hashlib.sha256(_utf8(text)).hexdigest()
    head = f"data:{url.group(1)};" if url else ""
    return f"{head}sha256={sha};bytes={len(text)}"


def _image_tokens(item: Mapping[str, Any]) -> int | None:
    """The approximate tokens an image content part costs, None for anything else."""
    if item.get("type") not in _IMAGE_TYPES:
        return None
    inner = item.get("image_url")
    detail = inner.get("detail") if isinstance(inner, Mapping) else item.get("detail")
    return IMAGE_TOKENS_LOW if detail == "low" else IMAGE_TOKENS


def _key_text(key: Any) -> str:
    return key if isinstance(key, str) else str(key)


def _scalar(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(_shorten(value), ensure_ascii=False)
    if value is None or isinstance(value, bool | int | float):
        return json.dumps(value)
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def _encode(value: Any, sort_keys: bool, out: list[_Piece]) -> None:
    """Append the JSON text of `value` to `out`, with a `_Pad` after each image."""
    if isinstance(value, Mapping):
        keys = sorted(value, key=_key_text) if sort_keys else list(value)
        out.append("{")
        for i, key in enumerate(keys):
            out.append(("," if i else "") + json.dumps(_key_text(key), ensure_ascii=False) + ":")
            _encode(value[key], sort_keys, out)
        out.append("}")
        tokens = _image_tokens(value)
        if tokens is not None:
            out.append(_Pad(b"", tokens))  # its digest is filled in by `_pieces`
    elif isinstance(value, list | tuple):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _encode(item, sort_keys, out)
        out.append("]")
    else:
        out.append(_scalar(value))


def _pieces(value: Any, sort_keys: bool = True) -> list[_Piece]:
    """The JSON of `value` as text runs and image pads; each pad's digest is that of
    the text before it in the part, so two different images never pad alike."""
    raw: list[_Piece] = []
    _encode(value, sort_keys, raw)
    merged: list[_Piece] = []
    run: list[str] = []
    seen = hashlib.blake2b(digest_size=_DIGEST_BYTES, person=b"cw-pad")
    for piece in raw:
        if isinstance(piece, str):
            run.append(piece)
            continue
        text = "".join(run)
        seen.update(_utf8(text))
        merged.extend([text, _Pad(seen.copy().digest(), piece.tokens)])
        run = []
    merged.append("".join(run))
    return [p for p in merged if p != ""]


def _text(pieces: Iterable[_Piece]) -> str:
    return "".join(p for p in pieces if isinstance(p, str))


def canonical_json(value: Any) -> str:
    """Sorted-key JSON with fixed separators, binary payloads as their SHA-256:
    the text a part is hashed by."""
    return _text(_pieces(value))


# -------------------------------------------------------------------- fingerprint


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
) -> RecordFields:
    """The fingerprint fields of a usage record for this request body (see the module
    docstring for the serialization and the token approximation). Compute it on the
    exact body you send, after every transformation, and spread the result into the
    record: `{"request_id": ..., **fingerprint(body)}`."""
    if block_size <= 0:
        raise ValueError("block_size must be positive")
    rendered = [_render(p) for p in _request_parts(body)]
    segments: list[SegmentFields] = []
    stream_bytes: list[bytes] = []
    stream_ids: list[int] = []
    for part in rendered:
        if tokenizer is None:
            units = _approx_units(part.pieces)
            stream_bytes.append(units)
            tokens = _approx_tokens(units)
        else:
            ids = _token_units(part.pieces, tokenizer)
            stream_ids.extend(ids)
            tokens = len(ids)
        segments.append({"name": part.name, "hash": part.digest.hex(), "tokens": tokens})
    mode = b"bytes/4" if tokenizer is None else b"tokens"
    seed = _digest(_VERSION + b"|" + mode + b"|" + str(block_size).encode(), b"cw-seed")
    blocks = (
        _byte_blocks(b"".join(stream_bytes), block_size)
        if tokenizer is None
        else _id_blocks(stream_ids, block_size)
    )
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


# ------------------------------------------------------------ divergence: results


class HintCode(StrEnum):
    """The known anti-patterns that break a shared prefix."""

    TIMESTAMP = "timestamp"
    REQUEST_ID = "request_id"
    USER_DATA = "user_data"
    REORDERED_TOOLS = "reordered_tools"
    REORDERED_KEYS = "reordered_keys"
    WHITESPACE = "whitespace"
    IMAGE_DETAIL = "image_detail"
    URL_QUERY = "url_query"
    REWRITTEN_HISTORY = "rewritten_history"


@dataclass(frozen=True)
class Hint:
    """A recognised anti-pattern: its code, and a sentence saying what to change."""

    code: HintCode
    message: str


@dataclass(frozen=True)
class Divergence:
    """Where two requests stop sharing a prefix.

    `part` is the first part (segment name) that differs, `part_b` the part B has
    at that position (the same name unless one request has a part the other lacks).
    `offset` is the character offset of the first difference in the part's JSON
    text, the text the excerpts are cut from: the canonical (sorted-key) JSON,
    or the JSON as sent when only the key order differs (`reordered_keys`); when
    the parts themselves differ, it is 0 and the excerpts start with their names. `path`
    is the JSON path of the first differing value, `shared_tokens` the approximate
    tokens both requests share before it. `caret` is the column of the first
    difference in both excerpts."""

    part: str
    part_b: str
    part_index: int
    offset: int
    path: str
    excerpt_a: str
    excerpt_b: str
    caret: int
    shared_tokens: int
    hint: Hint | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        if self.part != self.part_b:
            where = f"at part {self.part_index}: A has `{self.part}` where B has `{self.part_b}`"
        else:
            where = f"in `{self.part}` at character {self.offset} ({self.path})"
        lines = [
            f"the requests diverge {where}, after about {self.shared_tokens} shared tokens",
            f"  A: {self.excerpt_a}",
            f"  B: {self.excerpt_b}",
            "     " + " " * self.caret + "^",
        ]
        if self.hint is None:
            lines.append("no known anti-pattern recognised: compare the excerpts above")
        else:
            lines.append(f"hint ({self.hint.code}): {self.hint.message}")
        return "\n".join(lines)


# ----------------------------------------------------- divergence: locating it

_MISSING: Final = object()
_Path = tuple[str | int, ...]
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_EXCERPT_BEFORE: Final = 40
_EXCERPT_AFTER: Final = 40


def _format_path(name: str, path: _Path) -> str:
    out = [name]
    for key in path:
        if isinstance(key, int):
            out.append(f"[{key}]")
        elif _IDENTIFIER.fullmatch(key):
            out.append(f".{key}")
        else:
            out.append(f"[{json.dumps(key, ensure_ascii=False)}]")
    return "".join(out)


def _first_difference(a: Any, b: Any, path: _Path = ()) -> tuple[_Path, Any, Any]:
    """The first differing value in canonical (sorted-key) order: its path and both
    sides (`_MISSING` where one side has nothing there)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in sorted(set(map(_key_text, a)) | set(map(_key_text, b))):
            va, vb = a.get(key, _MISSING), b.get(key, _MISSING)
            if va is _MISSING or vb is _MISSING or canonical_json(va) != canonical_json(vb):
                return _first_difference(va, vb, (*path, key))
    elif isinstance(a, list | tuple) and isinstance(b, list | tuple):
        for i in range(max(len(a), len(b))):
            va = a[i] if i < len(a) else _MISSING
            vb = b[i] if i < len(b) else _MISSING
            if va is _MISSING or vb is _MISSING or canonical_json(va) != canonical_json(vb):
                return _first_difference(va, vb, (*path, i))
    return path, a, b


def _first_key_order_difference(a: Any, b: Any, path: _Path = ()) -> _Path:
    """The path of the first object whose keys come in another order."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        if list(map(_key_text, a)) != list(map(_key_text, b)):
            return path
        for key in a:
            if _raw_json(a[key]) != _raw_json(b[key]):
                return _first_key_order_difference(a[key], b[key], (*path, _key_text(key)))
    elif isinstance(a, list | tuple) and isinstance(b, list | tuple):
        for i, (va, vb) in enumerate(zip(a, b, strict=False)):
            if _raw_json(va) != _raw_json(vb):
                return _first_key_order_difference(va, vb, (*path, i))
    return path


def _raw_json(value: Any) -> str:
    """The JSON as sent: keys in their insertion order."""
    return _text(_pieces(value, sort_keys=False))


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _excerpt(text: str, offset: int) -> tuple[str, int]:
    start = max(0, offset - _EXCERPT_BEFORE)
    end = offset + _EXCERPT_AFTER
    head = "..." if start > 0 else ""
    tail = "..." if end < len(text) else ""
    return f"{head}{text[start:end]}{tail}", offset - start + len(head)


@dataclass(frozen=True)
class _Diff:
    """What the hint rules look at: the first differing value of one part."""

    index: int
    part: str
    path: _Path
    a: Any
    b: Any
    parts_a: list[_Part]
    parts_b: list[_Part]


def explain_divergence(a: Mapping[str, Any], b: Mapping[str, Any]) -> Divergence | None:
    """Where requests `a` and `b` (request bodies, as for `fingerprint`) stop sharing
    a prefix, what differs there and, when it looks like a known anti-pattern, a
    hint. None when they do not diverge: one renders as a prefix of the other
    (for example B is A with more messages appended), which is what a cache wants.

    Parts are compared on their canonical JSON, as fingerprints are; when that is
    equal but the JSON as sent orders keys differently, the divergence is reported
    there (`reordered_keys`): fingerprints hash both alike, the provider does not."""
    parts_a, parts_b = _request_parts(a), _request_parts(b)
    shared_bytes = 0
    for index, (pa, pb) in enumerate(zip(parts_a, parts_b, strict=False)):
        header = len(_utf8(f"{pa.name}\n"))
        found = _compare_parts(index, pa, pb, parts_a, parts_b, shared_bytes + header)
        if found is not None:
            return found
        shared_bytes += len(_approx_units(_render(pa).pieces))
    return None


@dataclass(frozen=True)
class _Site:
    """The first difference between two parts' JSON texts."""

    index: int
    name_a: str
    name_b: str
    text_a: str
    text_b: str
    offset: int
    path: str


def _compare_parts(
    index: int,
    pa: _Part,
    pb: _Part,
    parts_a: list[_Part],
    parts_b: list[_Part],
    shared_bytes: int,
) -> Divergence | None:
    ta, tb = canonical_json(pa.value), canonical_json(pb.value)
    if pa.name != pb.name:  # the excerpts then start with the part names, which differ
        site = _Site(index, pa.name, pb.name, f"{pa.name}: {ta}", f"{pb.name}: {tb}", 0, pa.name)
        return _divergence(site, shared_bytes, None)
    if ta != tb:
        path, va, vb = _first_difference(pa.value, pb.value)
        where = _format_path(pa.name, path)
        site = _Site(index, pa.name, pb.name, ta, tb, _common_prefix(ta, tb), where)
        return _divergence(
            site, shared_bytes, _hint(_Diff(index, pa.name, path, va, vb, parts_a, parts_b))
        )
    ra, rb = _raw_json(pa.raw), _raw_json(pb.raw)
    if ra != rb and canonical_json(pa.raw) == canonical_json(pb.raw):
        where = _format_path(pa.name, _first_key_order_difference(pa.raw, pb.raw))
        site = _Site(index, pa.name, pb.name, ra, rb, _common_prefix(ra, rb), where)
        return _divergence(site, shared_bytes, Hint(HintCode.REORDERED_KEYS, _REORDERED_KEYS))
    return None


def _divergence(site: _Site, shared_bytes: int, hint: Hint | None) -> Divergence:
    excerpt_a, caret = _excerpt(site.text_a, site.offset)
    excerpt_b, _ = _excerpt(site.text_b, site.offset)
    shared = shared_bytes + len(_utf8(site.text_a[: site.offset]))
    return Divergence(
        part=site.name_a,
        part_b=site.name_b,
        part_index=site.index,
        offset=site.offset,
        path=site.path,
        excerpt_a=excerpt_a,
        excerpt_b=excerpt_b,
        caret=caret,
        shared_tokens=shared // BYTES_PER_TOKEN,
        hint=hint,
    )


# ------------------------------------------------------- divergence: the hints

_REORDERED_KEYS: Final = (
    "the same JSON value with its keys in another order: cachewatch's fingerprints hash "
    "both alike, but the provider sees different bytes (schemas and tools are rendered "
    "in the order sent). Build these objects in a fixed key order, or serialize them "
    "with sorted keys."
)

_MONTH = (
    r"(?:January|February|March|April|May|June|July|August|September|October|November"
    r"|December|Jan|Feb|Mar|Apr|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)\b\.?"
)
_TIME = re.compile(
    "|".join(
        [
            r"\d{4}-\d{2}-\d{2}(?:[T ]\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?)?(?:Z|[+-]\d{2}:?\d{2})?",
            r"\b\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:\s?[AaPp]\.?[Mm]\.?)?",
            r"\b\d{1,2}/\d{1,2}/\d{2,4}\b|\b\d{4}/\d{1,2}/\d{1,2}\b|\b\d{1,2}\.\d{1,2}\.\d{4}\b",
            rf"\b{_MONTH}\s+\d{{1,4}}(?:st|nd|rd|th)?\b",
            rf"\b\d{{1,2}}(?:st|nd|rd|th)?\s+{_MONTH}",
            r"\b(?:Mon|Tues?|Wed(?:nes)?|Thu(?:rs?)?|Fri|Sat(?:ur)?|Sun)(?:day)?\b",
            r"\b1[5-9]\d{8}(?:\d{3}){0,2}\b",  # epoch s, ms or us, 2017-2033
        ]
    )
)
_ID = re.compile(
    "|".join(
        [
            r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b",
            r"\b(?=[0-9a-fA-F]*\d)(?=[0-9a-fA-F]*[a-fA-F])[0-9a-fA-F]{16,}\b",
            r"\b[0-9A-HJKMNP-TV-Z]{26}\b",  # ULID
            r"\b(?:req|request|trace|span|msg|chatcmpl|resp|run|call|toolu|sess|evt|txn)"
            r"[-_][A-Za-z0-9_-]{4,}\b",
        ]
    )
)
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_ID_KEY = re.compile(
    r"(?i)^(?:request|req|trace|span|correlation|session|idempotency|tool_?call|call|run"
    r"|conversation|message|msg|event|transaction)[_-]?id$|^(?:id|uuid|guid|nonce)$"
)
_TIME_KEY = re.compile(r"(?:[Dd]ate|[Tt]ime|[Tt]imestamp|DATE|TIME)$|^(?:now|today)$|_at$|[a-z]At$")
_USER_KEY = re.compile(
    r"(?i)^(?:user|tenant|customer|company|organi[sz]ation|org|account|workspace|team)"
    r"(?:[_-]?(?:id|name|email))?$|email$"
)
_ID_BEFORE = re.compile(r"(?i)\b(?:id|uuid|nonce|request|trace)\b\W{0,3}$")
_TIME_BEFORE = re.compile(r"(?i)\b(?:date|time|today|timestamp|as of)\b\W{0,3}$")
_USER_BEFORE = re.compile(
    r"(?i)\b(?:user|username|name|customer|client|tenant|company|organi[sz]ation|account"
    r"|workspace|team|email|hello|hi|dear)\b\W{0,3}$"
)
_NAME_WORDS = re.compile(r"[A-Z][\w'&.-]*(?: [A-Z][\w'&.-]*){0,2}")
_EMBEDDED: Final = 8
_LOCAL_EDIT: Final = 64  # longer differing spans are rewrites, not an inserted value
_BEFORE: Final = 32


def _hint(diff: _Diff) -> Hint | None:
    """The first rule that recognises the difference, most specific first."""
    rules: tuple[Callable[[_Diff], Hint | None], ...] = (
        _reordered_tools,
        _image_detail,
        _url_query,
        _whitespace,
        _local_value,
        _rewritten_history,
    )
    return next((h for h in (rule(diff) for rule in rules) if h is not None), None)


def _tool_name(tool: Any) -> str:
    if not isinstance(tool, Mapping):
        return canonical_json(tool)
    function = tool.get("function")
    name = function.get("name") if isinstance(function, Mapping) else tool.get("name")
    return str(name)


def _reordered_tools(diff: _Diff) -> Hint | None:
    if diff.part != "tools":
        return None
    tools_a, tools_b = diff.parts_a[diff.index].value, diff.parts_b[diff.index].value
    texts_a, texts_b = [canonical_json(t) for t in tools_a], [canonical_json(t) for t in tools_b]
    names_a, names_b = [_tool_name(t) for t in tools_a], [_tool_name(t) for t in tools_b]
    if sorted(texts_a) == sorted(texts_b):
        what = f"the same {len(texts_a)} tools in another order"
    elif sorted(names_a) == sorted(names_b) and names_a != names_b:
        what = f"the same {len(names_a)} tool names in another order (some definitions differ too)"
    else:
        return None
    return Hint(
        HintCode.REORDERED_TOOLS,
        f"{what}: tools are rendered in list order, so the prompt differs from the first "
        "moved tool on. Keep one fixed order (e.g. sort the tools by name) instead of "
        "gathering them from an unordered registry.",
    )


def _last_key(diff: _Diff) -> str:
    keys = [k for k in diff.path if isinstance(k, str)]
    return keys[-1] if keys else ""


def _image_detail(diff: _Diff) -> Hint | None:
    if _last_key(diff) != "detail":
        return None
    return Hint(
        HintCode.IMAGE_DETAIL,
        f"the image `detail` differs ({_short(diff.a)} vs {_short(diff.b)}): the same image "
        "is encoded into different tokens. Send one detail level per image.",
    )


def _url_query(diff: _Diff) -> Hint | None:
    if not (isinstance(diff.a, str) and isinstance(diff.b, str)):
        return None
    ua, ub = urlsplit(diff.a), urlsplit(diff.b)
    same_resource = (ua.scheme, ua.netloc, ua.path) == (ub.scheme, ub.netloc, ub.path)
    if ua.scheme not in ("http", "https") or not same_resource:
        return None
    return Hint(
        HintCode.URL_QUERY,
        "the same URL with another query string (a signed or cache-busting URL?): the "
        "provider sees a different URL, and fetches and encodes an image anew. Use a "
        "stable URL, or send the image inline.",
    )


def _whitespace(diff: _Diff) -> Hint | None:
    """The strings differ first in whitespace, and agree again once it is skipped."""
    if not (isinstance(diff.a, str) and isinstance(diff.b, str)):
        return None
    p = _common_prefix(diff.a, diff.b)
    next_a, next_b = diff.a[p : p + 1], diff.b[p : p + 1]
    if not (next_a.isspace() or next_b.isspace()):
        return None
    rest_a, rest_b = diff.a[p:].lstrip(), diff.b[p:].lstrip()
    if rest_a[:_BEFORE] != rest_b[:_BEFORE]:
        return None
    return Hint(
        HintCode.WHITESPACE,
        f"only whitespace differs here ({json.dumps(diff.a[p:][:8])} vs "
        f"{json.dumps(diff.b[p:][:8])}): whitespace is tokenized like any text, so one "
        "newline against two breaks the prefix. Normalize whitespace when building the "
        "prompt (e.g. strip each part, then join with one newline).",
    )


def _leaf_text(value: Any) -> str | None:
    if value is _MISSING or isinstance(value, Mapping | list | tuple):
        return None
    return value if isinstance(value, str) else json.dumps(value)


def _spans(a: str, b: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """The differing middle of two strings: after their common prefix, before their
    common suffix."""
    p = _common_prefix(a, b)
    s = _common_prefix(a[p:][::-1], b[p:][::-1])
    return (p, len(a) - s), (p, len(b) - s)


def _overlapping(pattern: re.Pattern[str], text: str, span: tuple[int, int]) -> str | None:
    lo, hi = span
    if lo == hi:  # an insertion touches both neighbours
        lo, hi = lo - 1, hi + 1
    for match in pattern.finditer(text):
        if match.start() < hi and match.end() > lo:
            return match.group()
    return None


def _word_at(text: str, span: tuple[int, int]) -> str:
    """The differing span widened to whole words, for the hint sentence."""
    lo, hi = span
    while lo > 0 and (text[lo - 1].isalnum() or text[lo - 1] in "-_:.'"):
        lo -= 1
    while hi < len(text) and (text[hi].isalnum() or text[hi] in "-_:'"):
        hi += 1
    return text[lo:hi].strip(".")


@dataclass(frozen=True)
class _Local:
    """A small edit inside one value: both sides' text and differing span."""

    diff: _Diff
    a: str
    b: str
    span_a: tuple[int, int]
    span_b: tuple[int, int]

    def match(self, pattern: re.Pattern[str]) -> str | None:
        return _overlapping(pattern, self.a, self.span_a) or _overlapping(
            pattern, self.b, self.span_b
        )

    def before(self, pattern: re.Pattern[str]) -> bool:
        lo = self.span_a[0]
        return pattern.search(self.a[max(0, lo - _BEFORE) : lo]) is not None

    def key(self, pattern: re.Pattern[str]) -> bool:
        return any(pattern.search(k) for k in self.diff.path if isinstance(k, str))

    def embedded(self) -> bool:
        """Whether the edit sits inside shared text, as a value filled into a template."""
        lo, hi = self.span_a
        return lo >= _EMBEDDED or len(self.a) - hi >= _EMBEDDED

    def words(self) -> tuple[str, str]:
        return _word_at(self.a, self.span_a), _word_at(self.b, self.span_b)


def _local_value(diff: _Diff) -> Hint | None:
    """A value inserted into otherwise equal text: an id, a time, a user's data."""
    a, b = _leaf_text(diff.a), _leaf_text(diff.b)
    if a is None or b is None:
        return None
    span_a, span_b = _spans(a, b)
    if max(span_a[1] - span_a[0], span_b[1] - span_b[0]) > _LOCAL_EDIT:
        return None
    local = _Local(diff, a, b, span_a, span_b)
    rules = (_id_value, _time_value, _user_value)
    return next((h for h in (rule(local) for rule in rules) if h is not None), None)


def _values(local: _Local) -> str:
    word_a, word_b = local.words()
    return f"{_short(word_a)} vs {_short(word_b)}"


def _id_value(local: _Local) -> Hint | None:
    if not (local.match(_ID) or local.key(_ID_KEY) or local.before(_ID_BEFORE)):
        return None
    return Hint(
        HintCode.REQUEST_ID,
        f"a UUID or request id differs ({_values(local)}): an id makes every request's "
        "prompt unique from here on. Keep ids out of the prompt (send them as metadata "
        "or headers), or put them at its very end.",
    )


def _time_value(local: _Local) -> Hint | None:
    if not (local.match(_TIME) or local.key(_TIME_KEY) or local.before(_TIME_BEFORE)):
        return None
    return Hint(
        HintCode.TIMESTAMP,
        f"a timestamp or date differs ({_values(local)}): every request starts a new "
        "prefix here. Move the time to the end of the prompt (the last user message), "
        "or round it (to the day) if it must stay early.",
    )


def _user_value(local: _Local) -> Hint | None:
    word_a, word_b = local.words()
    names = local.embedded() and _NAME_WORDS.fullmatch(word_a) and _NAME_WORDS.fullmatch(word_b)
    if not (local.match(_EMAIL) or local.key(_USER_KEY) or local.before(_USER_BEFORE) or names):
        return None
    return Hint(
        HintCode.USER_DATA,
        f"user or tenant data differs ({_values(local)}): per-user text early in the "
        "prompt splits the cache per user. Put the shared instructions first and the "
        "user's or tenant's data after them (e.g. in the last user message).",
    )


def _rewritten_history(diff: _Diff) -> Hint | None:
    """An earlier message replaced (e.g. by a summary) while later messages continue:
    some message after the differing one appears, unchanged, after it in both."""
    if not diff.part.startswith("message["):
        return None
    later_a = {canonical_json(p.value) for p in diff.parts_a[diff.index + 1 :]}
    later_b = {canonical_json(p.value) for p in diff.parts_b[diff.index + 1 :]}
    if not later_a & later_b:
        return None
    return Hint(
        HintCode.REWRITTEN_HISTORY,
        f"an earlier message ({diff.part}) was rewritten (e.g. replaced by a summary) "
        "while later messages continue: everything after it is computed again. Append "
        "to the history instead of editing it, or compact it rarely and all at once.",
    )


def _short(value: Any, limit: int = 40) -> str:
    """A value for a hint sentence: quoted, cut short; `(absent)` for a missing one."""
    if value is _MISSING:
        return "(absent)"
    text = value if isinstance(value, str) else canonical_json(value)
    text = json.dumps(text, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 4] + '..."'
