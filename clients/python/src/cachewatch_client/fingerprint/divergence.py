"""`explain_divergence`: where two requests stop sharing a prefix, and why.

Parts are compared in rendering order; the first that differs is located, excerpted
and handed to the hint rules (`hints`), and its two values are normalized
(`normalize`) to tell whether they differ only in rendering.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .blocks import BYTES_PER_TOKEN, _approx_units, _render
from .canonical import _utf8, canonical_json
from .hints import _REORDERED_KEYS, _hint
from .locate import (
    _common_prefix,
    _Diff,
    _excerpt,
    _first_difference,
    _first_key_order_difference,
    _format_path,
    _raw_json,
)
from .normalize import Rendering, rendering_difference
from .parts import _Part, _request_parts
from .results import RENDERING_HINTS, Divergence, Hint, HintCode


def explain_divergence(a: Mapping[str, Any], b: Mapping[str, Any]) -> Divergence | None:
    """Where requests `a` and `b` (request bodies, as for `fingerprint`) stop sharing
    a prefix, what differs there and, when it looks like a known anti-pattern, a
    hint. None when they do not diverge: one renders as a prefix of the other
    (for example B is A with more messages appended), which is what a cache wants.

    Parts are compared on their canonical JSON, as fingerprints are; when that is
    equal but the JSON as sent orders keys differently, the divergence is reported
    there (`reordered_keys`): fingerprints hash both alike, the provider does not.

    When the first differing part differs only in rendering (both sides share its
    `norm_hash`; or only its key order as sent differs), `rendering` names how, and a
    hint about content (a timestamp, an id...) is not given: there is none."""
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
        return _divergence(site, shared_bytes, None, None)
    if ta != tb:
        path, va, vb = _first_difference(pa.value, pb.value)
        where = _format_path(pa.name, path)
        site = _Site(index, pa.name, pb.name, ta, tb, _common_prefix(ta, tb), where)
        hint = _hint(_Diff(index, pa.name, path, va, vb, parts_a, parts_b))
        rendering = rendering_difference(pa.value, pb.value)
        if rendering is not None and hint is not None and hint.code not in RENDERING_HINTS:
            hint = None
        return _divergence(site, shared_bytes, hint, rendering)
    ra, rb = _raw_json(pa.raw), _raw_json(pb.raw)
    if ra != rb and canonical_json(pa.raw) == canonical_json(pb.raw):
        where = _format_path(pa.name, _first_key_order_difference(pa.raw, pb.raw))
        site = _Site(index, pa.name, pb.name, ra, rb, _common_prefix(ra, rb), where)
        hint = Hint(HintCode.REORDERED_KEYS, _REORDERED_KEYS)
        return _divergence(site, shared_bytes, hint, (Rendering.KEY_ORDER,))
    return None


def _divergence(
    site: _Site, shared_bytes: int, hint: Hint | None, rendering: tuple[Rendering, ...] | None
) -> Divergence:
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
        rendering=rendering,
    )
