"""A finding (contract section 5b): an anti-pattern present in a range of traffic,
whether or not anything changed, with what it costs and the fix.

`KINDS` lists every kind once, in the order a report groups them when they cost the
same; every other module reads the kinds from here. `service.findings.fixes` gives
each kind's fix in the words of a senior engineer (the checklist the anti-patterns
come from: static content first, personalization at the end, one canonical
rendering, tools and schemas sorted and free of live ids, append-only history,
cache-key or prefix-aware routing, warm the shared start before fanning out, a KV
budget for the working set, a TTL for the traffic's pauses)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from service.rfc3339 import us_to_rfc3339

#: The segment kinds: read from the segment rollups.
SEGMENT_KINDS: tuple[str, ...] = ("volatile_segment", "template_drift")
#: The rewarm kinds, each the rewarms of one cause (contract section 4): the
#: finding's name for it and the cause.
REWARM_KINDS: dict[str, str] = {
    "routing": "routing",
    "cold_fanout": "concurrent",
    "eviction": "eviction",
    "expiry": "expiry",
    "below_minimum": "below_minimum",
}
KINDS: tuple[str, ...] = (*SEGMENT_KINDS, "history_rewrite", *REWARM_KINDS)


@dataclass(frozen=True)
class Finding:
    """One anti-pattern of one (service, model) over a range (contract section 5b).

    `since_us`: the start of the first hour of the range in which it held.
    `share_of_prompt_tokens`: the prompt tokens it affects over the (service,
    model)'s (which ones, per kind: section 5b). `wasted_tokens_per_day` and
    `wasted_usd_per_day` (None without prices) are per day of the range's data.
    `details` holds the figures the evidence was written from, for renderers that
    want numbers (a report's table, the dashboard), never needed to read it."""

    kind: str
    service: str
    model: str
    since_us: int
    share_of_prompt_tokens: float
    wasted_tokens_per_day: int
    wasted_usd_per_day: float | None
    evidence: list[str]
    fix: str
    segment: str | None = None
    group: dict[str, str] | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """The contract's JSON object."""
        return {
            "kind": self.kind,
            "service": self.service,
            "model": self.model,
            "group": self.group,
            "segment": self.segment,
            "since": us_to_rfc3339(self.since_us),
            "share_of_prompt_tokens": self.share_of_prompt_tokens,
            "wasted_tokens_per_day": self.wasted_tokens_per_day,
            "wasted_usd_per_day": self.wasted_usd_per_day,
            "evidence": list(self.evidence),
            "fix": self.fix,
        }


def worst_first(findings: list[Finding]) -> list[Finding]:
    """Most wasted tokens a day first (contract section 6); ties by share, then in
    KINDS order and by name, so the order is stable."""
    return sorted(
        findings,
        key=lambda f: (
            -f.wasted_tokens_per_day,
            -f.share_of_prompt_tokens,
            KINDS.index(f.kind),
            f.service,
            f.model,
            f.segment or "",
        ),
    )


#: What a range lacks for some kinds to be found at all, by code: the sentence the
#: dashboard's empty state and the report say (contract section 1 names the fields).
MISSING_DATA: dict[str, str] = {
    "segments": "send `segments` to see which part of the prompt varies",
    "fingerprints": (
        "send `block_hashes` (or `prefix_hash`) to see the ceiling and every rewarm's cause"
    ),
    "sessions": "send `session_id` to see whether conversations rewrite their history",
    "replicas": "send `replica` to tell routing from eviction",
    "ttft": "send `ttft_ms` to see cold fan-outs (requests sent while the prefix was in prefill)",
}


@dataclass(frozen=True)
class FindingsResult:
    """The findings of a range, worst first, with what the range's records lack
    (codes of MISSING_DATA, in its order) and the days its per-day figures divide by."""

    findings: list[Finding]
    missing: list[str]
    days: float
