"""What `explain_divergence` returns: a `Divergence`, with the `Hint` it carries."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, Final

from .normalize import Rendering, describe_renderings


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


# The hints that explain a difference of rendering: the others (a timestamp, an id,
# a rewritten message...) are differences of content, which a part differing only
# in rendering does not have.
RENDERING_HINTS: Final = frozenset(
    {HintCode.WHITESPACE, HintCode.REORDERED_KEYS, HintCode.IMAGE_DETAIL, HintCode.URL_QUERY}
)


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
    difference in both excerpts.

    `rendering` is None when the part differs in content; when it differs only in
    how it was rendered (both sides share its `norm_hash`, or only its JSON key
    order as sent differs), the kinds of rendering difference (`Rendering`), empty
    when they cannot be told apart. The requests still diverge for the cache: the
    provider sees other tokens."""

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
    rendering: tuple[Rendering, ...] | None

    @property
    def rendering_message(self) -> str | None:
        """The sentence saying the part differs only in rendering, None otherwise."""
        if self.rendering is None:
            return None
        kinds = f" ({describe_renderings(self.rendering)})" if self.rendering else ""
        return (
            f"`{self.part}` differs only in rendering{kinds}: the same prompt rendered two "
            "ways, each its own prefix in the cache (in traffic, the `template_drift` "
            "finding); render it through one code path"
        )

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
        if self.rendering_message is not None:
            lines.append(self.rendering_message)
        if self.hint is not None:
            lines.append(f"hint ({self.hint.code}): {self.hint.message}")
        elif self.rendering is None:
            lines.append("no known anti-pattern recognised: compare the excerpts above")
        return "\n".join(lines)
