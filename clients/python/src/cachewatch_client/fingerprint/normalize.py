"""`norm_hash`: a part's hash after normalizing how it was rendered.

Why
---
One prompt is often rendered by two code paths: a template that ends the system
prompt in one newline and another that ends it in two, a client that sends an
image at `detail: "high"` beside one that sends `"low"`, a CDN that signs each
image URL anew (`?sig=...&exp=...`), a tool call whose `arguments` JSON comes out
in another key order. The provider sees different bytes, so each rendering is a
prefix of its own and the cache is split between them; `hash` rightly differs.
`norm_hash` hashes the part after undoing those renderings, so two renderings of
one prompt share it (contract section 1): variants of a segment that share a
`norm_hash` but differ in `hash` are the `template_drift` finding (contract section
5b), and `explain_divergence` says when two requests differ only in rendering.

What is normalized (each kind a `Rendering`, a rule that can be left out, which is
how `rendering_difference` names the kinds a difference is made of):

- `whitespace`: in every string, each run of whitespace (`str.isspace`: spaces,
  tabs, newlines, ...) becomes one space, and leading and trailing whitespace is
  dropped: "Be brief.\\n", "Be brief.\\n\\n" and " Be  brief." are alike.
- `key_order`: objects are written with sorted keys (as for `hash`: canonical
  JSON), and so is JSON inside a string: a string that is, whitespace aside, a
  JSON object or array (a tool call's `arguments`, a document pasted into a prompt)
  is parsed and written canonically, so its key order and spacing do not count.
- `image_detail`: an image content part's `detail` (Chat's `image_url.detail`, the
  Responses API's `detail`) is dropped: the same image at another detail level.
- `url_query`: an http(s) URL loses its query string and fragment, as an image's
  URL and inside text: a re-signed URL still names the same image.

What is not: the text itself (a word, a timestamp, a user's name changes
`norm_hash` as it changes `hash`), letter case and punctuation, the order of list
items (tools in another order are another prompt, `reordered_tools`), and binary
payloads, which stay their digest as in `hash` (an inline image is content).
Limits, chosen knowingly: URLs that differ only in their query (`?id=1`, `?id=2`)
share `norm_hash` even when they name two resources; indentation in code is
whitespace here, although a model reads it; a URL's query is taken to end at
whitespace, a quote or a bracket, and before a final `.`, `,`, `;`, `:`, `!` or
`?`, so that text after a URL is not dropped.

Like the rest of the package this is the standard library only, deterministic
(no `hash()`, no dict order: canonical JSON), so `norm_hash` is the same in every
process and whatever `PYTHONHASHSEED`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Final

from .canonical import _IMAGE_TYPES, _digest, _shorten, _utf8, canonical_json


class Rendering(StrEnum):
    """A kind of rendering difference that `norm_hash` normalizes away."""

    WHITESPACE = "whitespace"
    KEY_ORDER = "key_order"
    IMAGE_DETAIL = "image_detail"
    URL_QUERY = "url_query"

    @property
    def label(self) -> str:
        """The kind in words, for the sentences that name it."""
        return _LABELS[self]


_LABELS: Final = {
    Rendering.WHITESPACE: "whitespace and newlines",
    Rendering.KEY_ORDER: "JSON key order",
    Rendering.IMAGE_DETAIL: "image `detail`",
    Rendering.URL_QUERY: "URL query string",
}
ALL_RENDERINGS: Final = frozenset(Rendering)

# An http(s) URL and, after it, its query string and fragment. Neither runs past
# whitespace, a quote, a backslash or a bracket, and the query does not end in the
# punctuation that ends a sentence: text after a URL is kept.
_STOP = r"\s\"'<>\\^`{}|\[\]()"
_URL = re.compile(rf"(https?://[^{_STOP}?#]+)[?#](?:[^{_STOP}]*[^{_STOP}.,;:!?])?", re.IGNORECASE)


def normalize(value: Any, kinds: frozenset[Rendering] = ALL_RENDERINGS) -> Any:
    """`value` (a part's value, as `parts` gives it) with the renderings `kinds`
    undone; canonical JSON then sorts its keys."""
    if isinstance(value, str):
        return _text(value, kinds)
    if isinstance(value, Mapping):
        drop_detail = Rendering.IMAGE_DETAIL in kinds and value.get("type") in _IMAGE_TYPES
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if drop_detail and key == "detail":
                continue
            if drop_detail and key == "image_url" and isinstance(item, Mapping):
                item = {k: v for k, v in item.items() if k != "detail"}
            out[key] = normalize(item, kinds)
        return out
    if isinstance(value, list | tuple):
        return [normalize(item, kinds) for item in value]
    return value


def _text(text: str, kinds: frozenset[Rendering]) -> str:
    if _shorten(text) != text:
        return text  # a binary payload: hashed by its digest, as in `hash`
    if Rendering.KEY_ORDER in kinds:
        embedded = _embedded_json(text, kinds)
        if embedded is not None:
            return embedded
    if Rendering.URL_QUERY in kinds:
        text = _URL.sub(r"\1", text)
    if Rendering.WHITESPACE in kinds:
        text = " ".join(text.split())
    return text


def _embedded_json(text: str, kinds: frozenset[Rendering]) -> str | None:
    """The canonical JSON of a string that is a JSON object or array, its own
    strings normalized too; None for any other string."""
    stripped = text.strip()
    if (stripped[:1], stripped[-1:]) not in (("{", "}"), ("[", "]")):
        return None
    try:
        parsed = json.loads(stripped)
        return canonical_json(normalize(parsed, kinds))
    except (ValueError, RecursionError):  # not JSON, or nested too deep to walk
        return None


def normalized_json(value: Any, kinds: frozenset[Rendering] = ALL_RENDERINGS) -> str:
    """The canonical JSON of `value` with the renderings `kinds` undone: the text
    `norm_hash` hashes (with every kind)."""
    return canonical_json(normalize(value, kinds))


def norm_digest(value: Any) -> bytes:
    """The digest behind a segment's `norm_hash` (its hex)."""
    return _digest(_utf8(normalized_json(value)), b"cw-norm")


def rendering_difference(a: Any, b: Any) -> tuple[Rendering, ...] | None:
    """How two part values that differ as sent differ in rendering: None when they
    differ in content (their `norm_hash` differs), else the kinds of rendering that
    make up the difference, in `Rendering` order: those without which, every other
    kind normalized, they would still differ. Empty when it cannot tell (two kinds
    that each alone make them alike)."""
    if normalized_json(a) != normalized_json(b):
        return None
    return tuple(
        kind
        for kind in Rendering
        if normalized_json(a, ALL_RENDERINGS - {kind})
        != normalized_json(b, ALL_RENDERINGS - {kind})
    )


def describe_renderings(kinds: tuple[Rendering, ...]) -> str:
    """The kinds in words, "whitespace and newlines, image `detail`"."""
    return ", ".join(kind.label for kind in kinds)
