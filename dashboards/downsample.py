"""The last guard of the 2,000-points-a-trace rule. The dashboard normally asks the
database for a bucket coarse enough (exact: rollups are re-summed); this merges
consecutive buckets of a metrics answer that still has too many, so a figure
builder never emits more, whatever it is given.

Sums and the ratios built from them stay exact. Three values cannot be merged
exactly from bucket values and are approximated: TTFT p50 (mean weighted by hits or
misses) and p95 (the maximum: never hides a slow bucket), replicas (the maximum),
unique_prefix_ratio (the mean weighted by fingerprinted requests: an upper bound,
as prefixes repeated across buckets count once per bucket)."""

from collections.abc import Sequence
from typing import Any

from service.services.series import ratio

_SUMMED = (
    "requests",
    "prompt_tokens",
    "cached_tokens",
    "fingerprinted_requests",
    "fingerprinted_prompt_tokens",
    "cacheable_tokens",
    "rewarm_tokens",
    "history_rewrites",
    "session_requests",
    "hits",
    "misses",
)


def _weighted(pairs: Sequence[tuple[float | None, float]]) -> float | None:
    known = [(v, w) for v, w in pairs if v is not None and w > 0]
    total = sum(w for _, w in known)
    return sum(v * w for v, w in known) / total if total else None


def _merge(group: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"ts": group[0]["ts"]}
    for name in _SUMMED:
        out[name] = sum(b.get(name) or 0 for b in group)
    fp_cached = sum((b.get("capture_ratio") or 0) * (b.get("cacheable_tokens") or 0) for b in group)
    out["hit_rate"] = ratio(out["cached_tokens"], out["prompt_tokens"])
    out["cacheable_fraction"] = ratio(out["cacheable_tokens"], out["fingerprinted_prompt_tokens"])
    out["capture_ratio"] = ratio(fp_cached, out["cacheable_tokens"])
    out["rewarm_share"] = ratio(out["rewarm_tokens"], out["prompt_tokens"])
    out["rewarms"] = {
        key: sum((b.get("rewarms") or {}).get(key, 0) for b in group)
        for key in ("total", "concurrent", "routing", "eviction", "unknown")
    }
    out["rewarm_tokens_by_cause"] = {
        key: sum((b.get("rewarm_tokens_by_cause") or {}).get(key, 0) for b in group)
        for key in ("concurrent", "routing", "eviction", "unknown")
    }
    out["unique_prefix_ratio"] = _weighted(
        [(b.get("unique_prefix_ratio"), b.get("fingerprinted_requests") or 0) for b in group]
    )
    out["replicas"] = max(b.get("replicas") or 0 for b in group)
    ttft: dict[str, dict[str, float | None]] = {}
    for outcome, weight in (("hit", "hits"), ("miss", "misses")):
        parts = [((b.get("ttft_ms") or {}).get(outcome) or {}, b.get(weight) or 0) for b in group]
        p95s = [p["p95"] for p, _ in parts if p.get("p95") is not None]
        ttft[outcome] = {
            "p50": _weighted([(p.get("p50"), w) for p, w in parts]),
            "p95": max(p95s) if p95s else None,
        }
    out["ttft_ms"] = ttft
    return out


def merge_buckets(buckets: Sequence[dict[str, Any]], max_points: int) -> list[dict[str, Any]]:
    """At most `max_points` buckets: groups of consecutive buckets merged."""
    if len(buckets) <= max_points:
        return list(buckets)
    factor = -(-len(buckets) // max_points)
    return [_merge(buckets[i : i + factor]) for i in range(0, len(buckets), factor)]
