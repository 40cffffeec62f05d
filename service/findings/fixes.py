"""Each finding's fix, in the words of a senior engineer: the checklist the
anti-patterns of contract section 5b come from. One home: the API, the report, the
dashboard and the demo all say these."""

from __future__ import annotations

from service.alerts.money import usd_per_day
from service.alerts.wording import duration

_SEGMENT_FIXES = {
    "tools": (
        "send the tools in one fixed order (sorted by name), built once, with no request "
        "id, time or user data in their names, descriptions or schemas"
    ),
    "response_format": (
        "build the output schema once, with its keys in a fixed order and no request id, "
        "time or user data inside"
    ),
    "system": (
        "keep the time, the user's name and other per-request values out of the system "
        "prompt: static content first, personalization at the end of the request (the "
        "last user message)"
    ),
}
_VOLATILE_DEFAULT = (
    "keep `{segment}` identical across requests: static content first, anything that "
    "changes per request (times, ids, user data) at the end of the request"
)


def volatile_segment(segment: str) -> str:
    return _SEGMENT_FIXES.get(segment, _VOLATILE_DEFAULT.format(segment=segment))


def template_drift(segment: str) -> str:
    return (
        f"render `{segment}` through one code path: one canonical template (the same "
        "whitespace and trailing newlines, JSON key order, image detail and URLs) for "
        "every service and scenario that sends it, so they share one cache entry"
    )


HISTORY_REWRITE = (
    "append to the conversation instead of rewriting it: keep earlier turns byte for "
    "byte (no re-summarizing, trimming, re-timestamping or reordering old messages); "
    "when history must be shortened, cut it rarely and at a fixed point"
)


def routing(carries_cache_key: bool) -> str:
    if carries_cache_key:
        return (
            "requests carry a cache key but the router ignores it: route by it "
            "(consistent hashing on `prompt_cache_key`, or a prefix-aware router) so "
            "each shared start stays on the replica that has it warm"
        )
    return (
        "route by prefix: send a `prompt_cache_key` (or a hash of the shared start) and "
        "have the router keep each key on one replica (consistent hashing, or a "
        "prefix-aware router) instead of round-robin"
    )


#: The second sentence is what llama-server taught (docs/lab.md): it keeps one cache
#: per slot and shares no prefix between slots, so a warmed start still costs one
#: recompute on each other slot a parallel call lands on.
COLD_FANOUT = (
    "warm the shared start before fanning out: send one request, wait for its first "
    "token, then send the parallel calls (they all find the prefix cached). An engine "
    "that keeps one cache per slot (llama-server) still recomputes it once on each "
    "other slot a parallel call lands on"
)


def eviction(needed_tokens: int | None) -> str:
    budget = f" of at least {needed_tokens:,} tokens" if needed_tokens else ""
    return (
        f"give the KV cache a budget for the working set{budget} per replica (more "
        "memory for the cache, fewer concurrent sequences, or CPU offload), or route so "
        "each replica sees a smaller share of the prefixes"
    )


def expiry(ttl_s: float | None, quiet_usd_per_day: float | None = None) -> str:
    """`quiet_usd_per_day`: what the expiry of the quiet hours costs a day (the lulls),
    which a keep-warm request must cost less than."""
    ttl = f" of {duration(ttl_s)}" if ttl_s else ""
    fix = (
        f"use a cache TTL for the traffic's pauses: the TTL{ttl} is shorter than the gaps "
        'between uses; ask for the longer one (Anthropic `"ttl": "1h"`, OpenAI '
        '`prompt_cache_retention: "24h"`) or keep the prefix warm with a cheap request'
    )
    if quiet_usd_per_day is None:
        return fix
    return (
        f"{fix} once per TTL through the quiet hours, if that costs less than the "
        f"{usd_per_day(quiet_usd_per_day)} they lose; or accept it: quiet hours expire "
        "prefixes by nature"
    )


def below_minimum(min_prompt_tokens: int | None) -> str:
    minimum = f"{min_prompt_tokens:,}" if min_prompt_tokens else "minimum"
    return (
        f"these prompts are shorter than the {minimum} tokens the provider caches at "
        "least: put the shared static context (instructions, tools, examples) into one "
        "prefix long enough to be cached, or stop counting on the cache for them"
    )
