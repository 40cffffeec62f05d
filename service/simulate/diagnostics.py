"""What Anthropic's cache diagnostics would say of a simulated session's turn
(docs/providers.md, "Providers' own miss diagnostics"), from the prompt changes the
simulation made: the same changes the records' fingerprints describe, so the
agreement cachewatch reports (`service.diagnoses`) can be checked against a
provider that knows the truth.

The provider compares each turn with the session's previous one (the caller
passes the previous response's id) by structure only, and names the earliest
divergence in the prompt's order: the model, then the parts before the messages
(`tools` as `tools_changed`, an output format as `unavailable`, the system prompt
and anything else rendered into it as `system_changed`), then the messages: an
earlier message altered, reordered or removed, rather than appended to, is
`messages_changed`. No divergence: `diagnostics` is null (the record carries
none), whatever the cache did: expiry and eviction are not its to name.
`cache_missed_input_tokens` estimates the tokens from the divergence on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from service.simulate.prompt import Piece
from service.simulate.state import Segment

#: The reason of a change before the messages, by the part's name; any other
#: part is rendered into the system prompt.
_PART_REASONS = {"tools": "tools_changed", "response_format": "unavailable"}


@dataclass(frozen=True)
class TurnView:
    """What the provider's fingerprint of a request holds: its model, the parts
    before the messages (name, hash, tokens), and its messages."""

    model: str
    parts: tuple[tuple[str, str, int], ...]
    messages: tuple[Piece, ...]

    @classmethod
    def of(cls, model: str, static: list[Segment], messages: list[Piece]) -> TurnView:
        parts = tuple((s["name"], s["hash"], int(s["tokens"])) for s in static)
        return cls(model, parts, tuple(messages))

    @property
    def tokens(self) -> int:
        return sum(p[2] for p in self.parts) + sum(m[1] for m in self.messages)


def diagnosis(previous: TurnView | None, current: TurnView) -> dict[str, Any] | None:
    """The `diagnostics` object of the current turn's response, or None (null)."""
    if previous is None:
        return None  # the first turn: nothing to compare with
    if previous.model != current.model:
        return _changed("model_changed", current.tokens)
    before = 0
    for i, part in enumerate(current.parts):
        if i >= len(previous.parts) or previous.parts[i][:2] != part[:2]:
            reason = _PART_REASONS.get(part[0], "system_changed")
            if reason == "unavailable":
                return {"cache_miss_reason": {"type": reason}}
            return _changed(reason, current.tokens - before)
        before += part[2]
    if len(previous.parts) > len(current.parts):
        return _changed("system_changed", current.tokens - before)
    kept, now = previous.messages, current.messages
    if now[: len(kept)] == kept:
        return None  # appended to: no divergence
    same = 0
    while same < min(len(kept), len(now)) and kept[same] == now[same]:
        same += 1
    before += sum(m[1] for m in now[:same])
    return _changed("messages_changed", current.tokens - before)


def _changed(reason: str, missed: int) -> dict[str, Any]:
    return {"cache_miss_reason": {"type": reason, "cache_missed_input_tokens": max(0, missed)}}
