"""The providers' miss reasons, and what cachewatch must find to agree with each:
one home for the mapping (docs/providers.md has the table and its sources).

cachewatch's side is a request's `verdict` (`service.diagnoses.verdicts`): a
rewarm's cause under the regression's names (`cold_fanout`, `expiry`, ...), or
`model_switch` (the session's previous request went to another model),
`history_rewrite`, `prefix_instability` (the prompt's start changed before its
messages), `none` (the start was reused; what follows is new), `unfingerprinted`
(no hashes: cachewatch cannot say). With it the segment classes the change lies
in (`SEGMENT_CLASSES`, joined by "+" when the first differing block straddles
two).
"""

from __future__ import annotations

from dataclasses import dataclass

#: A request segment's class, by the name the fingerprint gives it
#: (`cachewatch_client.fingerprint.parts`): OpenAI's `instructions` and every system turn
#: are rendered into `system`; each turn after is a `message[i]`.
MESSAGES = "messages"
SEGMENT_CLASSES = ("tools", "response_format", "system", MESSAGES, "other")
MESSAGE_PREFIX = "message["
#: Joins the classes of a straddling block's segments, in the prompt's order.
SEGMENT_JOIN = "+"


def segment_class(name: str) -> str:
    """The class of a segment name."""
    if name.startswith(MESSAGE_PREFIX):
        return MESSAGES
    return name if name in SEGMENT_CLASSES else "other"


#: cachewatch's verdicts besides the rewarm causes.
MODEL_SWITCH = "model_switch"
PREFIX_CHANGED = "prefix_instability"
HISTORY_REWRITE = "history_rewrite"
NOTHING_LOST = "none"
UNFINGERPRINTED = "unfingerprinted"


@dataclass(frozen=True)
class Expectation:
    """What cachewatch must have found for a request to agree with the provider's
    reason: one of `verdicts`, and (when `segments` is given) one of those classes
    among the verdict's segments."""

    verdicts: frozenset[str]
    segments: frozenset[str] | None
    meaning: str

    def agrees(self, verdict: str, segment: str) -> bool:
        if verdict not in self.verdicts:
            return False
        found = set(segment.split(SEGMENT_JOIN)) if segment else set()
        return self.segments is None or bool(found & self.segments)


def _change(*segments: str, also: tuple[str, ...] = ()) -> Expectation:
    where = " or ".join(f"`{s}`" for s in segments)
    return Expectation(
        frozenset((PREFIX_CHANGED, *also)), frozenset(segments), f"a change in {where}"
    )


_IN_MESSAGES = (HISTORY_REWRITE, NOTHING_LOST)

#: The provider reasons cachewatch compares, Anthropic's and OpenAI's (which share
#: `model_changed` and `tools_changed`), with what agrees with each.
EXPECTED: dict[str, Expectation] = {
    "system_changed": _change("system"),
    "tools_changed": _change("tools"),
    "messages_changed": _change(MESSAGES, also=_IN_MESSAGES),
    "context_compacted": _change(MESSAGES, also=_IN_MESSAGES),
    "text_format_changed": _change("response_format"),
    "input_changed": _change("system", MESSAGES, also=_IN_MESSAGES),
    "model_changed": Expectation(
        frozenset((MODEL_SWITCH,)), None, "the session's previous request on another model"
    ),
    "prompt_cache_key_changed": Expectation(
        frozenset(("routing", "unknown")),
        None,
        "a rewarm of an unchanged start, routing or unknown",
    ),
}
#: Reasons about request options cachewatch does not fingerprint: listed, never
#: counted in the agreement.
NO_COUNTERPART = frozenset(
    ("reasoning_effort_changed", "verbosity_changed", "service_tier_changed")
)
#: Outcomes that name no reason: listed, never counted.
NO_REASON = frozenset(
    ("previous_message_not_found", "comparison_response_not_found", "unavailable", "cache_hit")
)


def reason_kind(reason: str) -> str:
    """`compared`, `no_counterpart`, `no_reason`, or `unrecognised` (a reason
    cachewatch does not know yet: kept as sent, listed, never counted)."""
    if reason in EXPECTED:
        return "compared"
    if reason in NO_COUNTERPART:
        return "no_counterpart"
    return "no_reason" if reason in NO_REASON else "unrecognised"
