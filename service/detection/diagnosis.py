"""Cause and evidence of a regression (contract section 5), from the figures before
and after the change."""

from __future__ import annotations

from dataclasses import dataclass

from service.detection.changepoints import Drop
from service.detection.series import Series, Stretch, stretch

#: A regression's cause for the rewarm cause holding the most rewarm tokens after
#: it (contract section 5): the concurrent rewarms are a cold fan-out.
REWARM_CAUSE_NAMES = {
    "below_minimum": "below_minimum",
    "concurrent": "cold_fanout",
    "expiry": "expiry",
    "routing": "routing",
    "eviction": "eviction",
}


@dataclass(frozen=True)
class SegmentVariants:
    """Distinct hashes per hour of each segment (before, after), and requests per
    hour (before, after)."""

    per_hour: dict[str, tuple[float, float]]
    requests_per_hour: tuple[float, float]

    def became_varied(self) -> list[tuple[str, float, float]]:
        """Segments whose share of distinct values per request at least doubled and
        moved by 10 points: a part that became unique, not one that follows traffic
        (per-session messages have more variants when there are more sessions)."""
        rate_was, rate_now = (max(r, 1.0) for r in self.requests_per_hour)
        found = []
        for name, (was, now) in self.per_hour.items():
            share_was, share_now = min(was / rate_was, 1.0), min(now / rate_now, 1.0)
            if share_now >= 2 * share_was and share_now - share_was >= 0.10:
                found.append((share_now - share_was, name, was, now))
        return [(name, was, now) for _, name, was, now in sorted(found, reverse=True)]


@dataclass(frozen=True)
class Diagnosis:
    cause: str
    evidence: list[str]


#: The cause of a drop the figures do not explain: two of them are not one cause.
UNKNOWN = "unknown"
#: Causes that come and go with the load: a working set outgrowing a KV budget only
#: at the busy hours, a provider TTL outlasted by the gaps between requests.
LOAD_BOUND_CAUSES = ("eviction", "expiry")


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.0f}%"


def cause_of(before: Stretch, after: Stretch) -> str:
    """1. The ceiling fell with the hit rate (by at least half the drop): the prompt's
    start changed. History rewrites if continuing sessions lost their prefix while
    opening requests kept theirs, else prefix instability. 2. Otherwise the rewarm
    cause holding the most rewarm tokens after the change. 3. Otherwise unknown."""
    drop = before.hit_rate - after.hit_rate
    if before.cacheable_fraction is not None and after.cacheable_fraction is not None:
        ceiling_fall = before.cacheable_fraction - after.cacheable_fraction
        if ceiling_fall >= drop / 2:
            rewrites_rose = (after.history_rewrite_share or 0.0) - (
                before.history_rewrite_share or 0.0
            ) >= 0.20 - 1e-9  # inclusive: 10% -> 30% is 20 points despite float rounding
            openers_kept = (
                before.opening_cacheable_fraction is None
                or after.opening_cacheable_fraction is None
                or before.opening_cacheable_fraction - after.opening_cacheable_fraction < 0.05
            )
            return "history_rewrite" if rewrites_rose and openers_kept else "prefix_instability"
    if sum(after.rewarm_tokens.values()) > 0:
        top = max(after.rewarm_tokens, key=lambda c: after.rewarm_tokens[c])
        return REWARM_CAUSE_NAMES.get(top, UNKNOWN)
    return UNKNOWN


def drop_cause(series: Series, drop: Drop) -> str:
    """The cause of a drop of a series, from its figures before and after."""
    before = stretch(series, drop.before.start, drop.before.end)
    return cause_of(before, stretch(series, drop.after.start, drop.after.end))


def evidence_of(
    before: Stretch,
    after: Stretch,
    segment_variants: SegmentVariants,
) -> list[str]:
    """Numbered facts a reader can check, most telling first."""
    lines = [
        f"hit rate {_pct(before.hit_rate)} -> {_pct(after.hit_rate)}; cacheable fraction "
        f"{_pct(before.cacheable_fraction)} -> {_pct(after.cacheable_fraction)}"
    ]
    if (
        before.unique_prefix_ratio is not None
        and after.unique_prefix_ratio is not None
        and abs(after.unique_prefix_ratio - before.unique_prefix_ratio) >= 0.05
    ):
        lines.append(
            f"unique_prefix_ratio {before.unique_prefix_ratio:.2f} -> "
            f"{after.unique_prefix_ratio:.2f} (distinct request starts per request)"
        )
    for name, was, now in segment_variants.became_varied()[:3]:
        lines.append(
            f"segment `{name}` had {was:.0f} variant{'s' if round(was) != 1 else ''} per hour "
            f"before and {now:.0f} after"
        )
    if before.history_rewrite_share is not None or after.history_rewrite_share is not None:
        lines.append(
            f"history rewrites: {_pct(before.history_rewrite_share)} of continuing session "
            f"requests before, {_pct(after.history_rewrite_share)} after; opening requests' "
            f"cacheable fraction {_pct(before.opening_cacheable_fraction)} -> "
            f"{_pct(after.opening_cacheable_fraction)}"
        )
    total = sum(after.rewarm_tokens.values())
    if total:
        shares = ", ".join(
            f"{name} {count / total * 100:.0f}%"
            for name, count in sorted(after.rewarm_tokens.items(), key=lambda kv: -kv[1])
            if count
        )
        lines.append(
            f"rewarm share {_pct(before.rewarm_share)} -> {_pct(after.rewarm_share)}; "
            f"rewarm tokens after the change by cause: {shares}"
        )
    if before.replicas != after.replicas:
        lines.append(f"replicas serving: {before.replicas} -> {after.replicas}")
    return lines


def recovery_evidence(after: Stretch, recovered: Stretch | None) -> list[str]:
    """How it recovered, when that says something: the traffic now on fewer replicas
    per bucket than during the drop. A cache-aware router that recovers the hit rate
    of a round-robin fleet by sending every request to one replica (measured on
    sglang-router's `cache_aware` in front of four llama-server replicas,
    docs/lab.md: 100% on one) has traded the cache misses for a hot spot: one
    replica's capacity for the whole service, and its cache to lose if it fails."""
    if recovered is None or not 0 < recovered.replicas < after.replicas:
        return []
    serve = "serves" if recovered.replicas == 1 else "serve"
    return [
        f"since the recovery {recovered.replicas} of the {after.replicas} replicas {serve} "
        f"each bucket: if the others still run, the traffic is concentrated on "
        f"{'it' if recovered.replicas == 1 else 'them'} (a hot spot)"
    ]


def diagnose(
    before: Stretch,
    after: Stretch,
    segment_variants: SegmentVariants,
    recovered: Stretch | None = None,
) -> Diagnosis:
    """Cause and evidence; `recovered`, the buckets after a recovery, adds how it
    recovered (`recovery_evidence`)."""
    evidence = evidence_of(before, after, segment_variants) + recovery_evidence(after, recovered)
    return Diagnosis(cause_of(before, after), evidence)
