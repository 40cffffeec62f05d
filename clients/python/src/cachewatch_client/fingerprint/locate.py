"""Locating the first difference between two parts, and formatting it.

Values are compared in canonical (sorted-key) order, as fingerprints hash them;
`_first_key_order_difference` looks at the JSON as sent instead.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from .canonical import _key_text, _pieces, _text, canonical_json
from .parts import _Part

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


def _short(value: Any, limit: int = 40) -> str:
    """A value for a hint sentence: quoted, cut short; `(absent)` for a missing one."""
    if value is _MISSING:
        return "(absent)"
    text = value if isinstance(value, str) else canonical_json(value)
    text = json.dumps(text, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 4] + '..."'
