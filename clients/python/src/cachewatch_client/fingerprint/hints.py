"""The anti-pattern rules: which known mistake a first difference looks like.

Rules are tried most specific first; the rules on a value inserted into otherwise
equal text (an id, a time, a user's data) are in `values`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final
from urllib.parse import urlsplit

from .canonical import canonical_json
from .locate import _common_prefix, _Diff, _short
from .results import Hint, HintCode
from .values import _BEFORE, _local_value

_REORDERED_KEYS: Final = (
    "the same JSON value with its keys in another order: cachewatch's fingerprints hash "
    "both alike, but the provider sees different bytes (schemas and tools are rendered "
    "in the order sent). Build these objects in a fixed key order, or serialize them "
    "with sorted keys."
)


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
