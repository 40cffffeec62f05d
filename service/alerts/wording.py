"""The words of an alert: percentages, durations, times, the attributed change and
the cause in sentences a user can act on. Pure functions of the regression's JSON
(contract section 5); the results are mrkdwn, with user strings made inert by
`service.alerts.mrkdwn` (names as code spans, other data as plain text)."""

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from service.alerts.money import short_count, usd, usd_per_day
from service.alerts.mrkdwn import code, plain

CAUSE_LABELS: dict[str, str] = {
    "prefix_instability": "the start of the request changes",
    "history_rewrite": "conversation history is rewritten",
    "routing": "requests miss the replica that holds their prefix",
    "eviction": "prefixes are evicted before reuse",
    "expiry": "the provider's cache TTL expired between uses",
    "below_minimum": "prompts shorter than the provider's caching minimum",
    "cold_fanout": "parallel requests on a cold prefix",
    "unknown": "unknown",
}


def pct(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "n/a"
    return f"{value:.0%}"


#: A finding's kind (contract section 5b) as a report's heading names it.
FINDING_TITLES: dict[str, str] = {
    "volatile_segment": "Volatile segment",
    "template_drift": "Template drift",
    "history_rewrite": "History rewrite",
    "routing": "Routing misses",
    "cold_fanout": "Cold fan-out",
    "eviction": "Eviction",
    "expiry": "Cache expiry",
    "below_minimum": "Below the caching minimum",
}
#: What each kind of finding means, in the user's terms: the causes' labels for the
#: kinds that are a cause's rewarms (`service.findings.kinds.REWARM_KINDS`, not
#: imported here: the findings' modules may use these words) and history rewrites.
FINDING_LABELS: dict[str, str] = {
    "volatile_segment": "a part of the request's start differs between most requests",
    "template_drift": "one part of the prompt is rendered several ways, which splits the cache",
    **{
        kind: CAUSE_LABELS[kind]
        for kind in (
            "history_rewrite",
            "routing",
            "cold_fanout",
            "eviction",
            "expiry",
            "below_minimum",
        )
    },
}


def tokens(count: float) -> str:
    """`1 token`, `12,400 tokens`, `1.24M tokens`: whole tokens with thousands
    separators under a million, from a million on in three significant digits as
    millions of dollars are written (`money.short_count`). Not finite: `n/a`."""
    if isinstance(count, bool) or not isinstance(count, int | float) or not math.isfinite(count):
        return "n/a"
    whole = abs(count)
    rounded = math.floor(whole + 0.5)  # half away from zero, as `money` rounds
    sign = "-" if count < 0 and rounded else ""
    if whole < 999_999.5:
        shown = f"{rounded:,}"
        return f"{sign}{shown} token{'' if shown == '1' else 's'}"
    return f"{sign}{short_count(whole)} tokens"


_COST_KEYS = ("extra_usd_per_day", "usd_per_day_before", "usd_per_day_after")


def _cost(regression: Mapping[str, Any]) -> tuple[float, ...] | None:
    """(extra, before, after) dollars a day of the regression's `cost` (contract
    section 5), None when it has none (no prices) or not in the contract's shape."""
    cost = regression.get("cost")
    if not isinstance(cost, Mapping):
        return None
    try:
        return tuple(float(cost[key]) for key in _COST_KEYS)
    except (KeyError, TypeError, ValueError):
        return None


def cost_phrase(regression: Mapping[str, Any]) -> str | None:
    """`costs about $1,240 a day more` (or `less`), from the regression's `cost`;
    None without prices: then nothing is said about money."""
    numbers = _cost(regression)
    if numbers is None:
        return None
    extra = numbers[0]
    return f"costs about {usd(abs(extra))} a day {'less' if extra < 0 else 'more'}"


def cost_line(regression: Mapping[str, Any]) -> str | None:
    """The cost phrase and its two sides: `costs about $1,240 a day more: $1,651/day,
    against $410/day at the cost per prompt token before`; None without prices."""
    numbers, phrase = _cost(regression), cost_phrase(regression)
    if numbers is None or phrase is None:
        return None
    _, before, after = numbers
    return (
        f"{phrase}: {usd_per_day(after)}, against {usd_per_day(before)} at the cost "
        "per prompt token before"
    )


def duration(seconds: float) -> str:
    """`45 s`, `4 min`, `1 min 40 s`, `3 h 55 min`, `2 d 4 h`."""
    total = round(abs(seconds))
    sign = "-" if seconds < 0 and total else ""
    days, rest = divmod(total, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, secs = divmod(rest, 60)
    if days:
        parts = [f"{days} d", f"{hours} h" if hours else ""]
    elif hours:
        parts = [f"{hours} h", f"{minutes} min" if minutes else ""]
    elif minutes:
        parts = [f"{minutes} min", f"{secs} s" if secs else ""]
    else:
        parts = [f"{secs} s"]
    return sign + " ".join(p for p in parts if p)


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def when(text: str) -> str:
    """`2026-11-18 14:05 UTC` from the contract's RFC 3339."""
    return parse_time(text).strftime("%Y-%m-%d %H:%M UTC")


def event_name(attribution: Mapping[str, Any]) -> str:
    """`deploy `v42``, `the change to 4 replicas`, `a config change`, `a note`."""
    kind = str(attribution.get("kind") or "")
    if kind == "deploy" and attribution.get("deploy"):
        return "deploy " + code(str(attribution["deploy"]))
    if kind == "replicas" and attribution.get("replicas") is not None:
        return f"the change to {int(attribution['replicas'])} replicas"
    if kind == "config":
        return "a config change"
    if kind == "note":
        return "a noted change"
    return "a change event" if not kind else f"a {plain(kind)} event"


def attribution_line(regression: Mapping[str, Any]) -> str:
    """The change the drop is attributed to, with its lag, or that there is none."""
    attribution = regression.get("attributed_to")
    if not attribution:
        return "none recorded near the drop (no deploy, replica or config event)"
    lag_s = float(attribution.get("lag_s") or 0.0)
    source = plain(str(attribution.get("source") or "posted"))
    at = when(str(attribution["ts"])) if attribution.get("ts") else "an unknown time"
    if lag_s > 0:
        relation = "the drop began after it"
    elif lag_s < 0:
        # The change time is the start of its detection bucket, which can precede
        # the event that caused it.
        relation = "within the drop's first detection bucket"
    else:
        relation = "the drop began with it"
    return f"{event_name(attribution)} at {at} ({source}), lag {duration(lag_s)}: {relation}"


def _after_change(regression: Mapping[str, Any]) -> str:
    attribution = regression.get("attributed_to")
    return f" after {event_name(attribution)}" if attribution else ""


# Detection's line for a segment that became varied (service.detection.diagnosis).
# Anchored at both ends and greedy, so a name holding backticks, newlines or the
# words themselves is still read whole.
_SEGMENT_EVIDENCE = re.compile(
    r"segment `(.+)` had ([0-9]+(?:\.[0-9]+)?) variants? per hour before and "
    r"([0-9]+(?:\.[0-9]+)?) after",
    re.DOTALL,
)
_SEGMENT_HINTS = (
    ("tools", "tools serialized in a floating order, or with per-request data in them?"),
    ("response_format", "a JSON schema with a request id inside, or keys in a floating order?"),
    ("system", "a timestamp or per-user data at the top of the system prompt?"),
    ("message", "earlier messages rewritten instead of appended?"),
)


def evidence_line(line: str) -> str:
    """An evidence line as mrkdwn: a segment line with its name as a code span, any
    other line as plain text (whatever it holds, it formats nothing)."""
    match = _SEGMENT_EVIDENCE.fullmatch(line)
    if match is None:
        return plain(line)
    start, end = match.span(1)
    return plain(line[: start - 1]) + code(match[1]) + plain(line[end + 1 :])


def _unstable_part(regression: Mapping[str, Any]) -> str:
    """Names the part that started varying when the records carried segments."""
    for line in regression.get("evidence") or []:
        match = _SEGMENT_EVIDENCE.fullmatch(str(line))
        if match is None:
            continue
        name, was, now = match.groups()
        hint = next((h for key, h in _SEGMENT_HINTS if name.startswith(key)), "what changed there?")
        return (
            f"{code(name)} went from {float(was):.0f} to {float(now):.0f} variants an hour: {hint}"
        )
    return "a timestamp or per-user data moved to the top of the prompt?"


def cause_sentence(regression: Mapping[str, Any]) -> str:
    """One sentence per cause, in the user's terms, with a question to check first."""
    after = _after_change(regression)
    cause = str(regression.get("cause") or "unknown")
    if cause == "prefix_instability":
        return f"The start of the request became unique{after}: {_unstable_part(regression)}"
    if cause == "history_rewrite":
        return (
            f"Conversations stopped extending their history{after}: each turn rewrites "
            "earlier messages (summarized, trimmed or reordered?), so the previous turn's "
            "cache no longer matches."
        )
    if cause == "routing":
        return (
            f"Requests land on replicas that never saw their prefix{after}: "
            "more replicas, or routing without prefix affinity (round-robin)?"
        )
    if cause == "eviction":
        return (
            f"Prefixes are evicted before they are reused{after}: "
            "a smaller KV cache budget, a shorter TTL or more traffic per replica?"
        )
    if cause == "expiry":
        return (
            f"The provider's cache expired between uses{after}: requests sharing a "
            "prefix now come further apart than its TTL (a few minutes by default), so "
            "each one computes the prefix again: ask for a longer TTL (Anthropic "
            '`"ttl": "1h"`, OpenAI `prompt_cache_retention: "24h"`) or keep it warm?'
        )
    if cause == "below_minimum":
        return (
            f"Prompts fell below the provider's caching minimum{after}, and the "
            "provider caches nothing of a prompt that short (1,024 tokens on many "
            "models): did the shared start get shorter, with fewer tools or a trimmed "
            "system prompt?"
        )
    if cause == "cold_fanout":
        return (
            f"Many requests with the same new prefix start together{after}, before the "
            "first finished its prefill, so each computes it again: "
            "warm the prefix with one request before fanning out?"
        )
    return (
        f"The hit rate fell{after} but the records do not say why: "
        "send `block_hashes` (or `prefix_hash`) and `replica` so cachewatch can tell."
    )


def cause_label(regression: Mapping[str, Any]) -> str:
    cause = str(regression.get("cause"))
    return CAUSE_LABELS.get(cause) or plain(cause)
