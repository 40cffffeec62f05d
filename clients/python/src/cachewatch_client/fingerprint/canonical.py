"""Canonical JSON of a request part, and the hashing primitives.

The same value always gives the same text: keys sorted, fixed separators, UTF-8,
no `hash()` (hashes are BLAKE2b), whatever the dict order, process or
`PYTHONHASHSEED`. Binary payloads are written as their SHA-256, and each image is
followed by a `_Pad` standing for the tokens it costs (see the package docstring).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

IMAGE_TOKENS_LOW: Final = 85
IMAGE_TOKENS: Final = 765

_DIGEST_BYTES: Final = 8  # cachewatch keys hashes on 64 bits anyway (service.ingest.hashing)
_SHORTEN_OVER: Final = 256  # binary payloads longer than this are replaced by a digest
_BASE64 = re.compile(r"[A-Za-z0-9+/=_\-\r\n]+")
_DATA_URL = re.compile(r"data:([^;,]{0,100})(;[^,]{0,100})?,")
_IMAGE_TYPES: Final = frozenset({"image_url", "input_image", "image"})


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
