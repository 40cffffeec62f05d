"""Hint rules for a small edit inside one value: an id, a time, a user's data.

A value is recognised by its form (a UUID, a date, an email), by its key (`requestId`,
`created_at`, `tenant`) or by the words just before it (`Request ID:`, `Hello`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from .locate import _MISSING, _common_prefix, _Diff, _short
from .results import Hint, HintCode

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
