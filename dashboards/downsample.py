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

from service.services.series import MergedSums, contract_sums, metric_values_of


def _weighted(pairs: Sequence[tuple[float | None, float]]) -> float | None:
    known = [(v, w) for v, w in pairs if v is not None and w > 0]
    total = sum(w for _, w in known)
    return sum(v * w for v, w in known) / total if total else None


def _ttft(group: Sequence[dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """p50: the mean weighted by hits (or misses); p95: the maximum."""
    ttft: dict[str, dict[str, float | None]] = {}
    for outcome, weight in (("hit", "hits"), ("miss", "misses")):
        parts = [((b.get("ttft_ms") or {}).get(outcome) or {}, b.get(weight) or 0) for b in group]
        p95s = [p["p95"] for p, _ in parts if p.get("p95") is not None]
        ttft[outcome] = {
            "p50": _weighted([(p.get("p50"), w) for p, w in parts]),
            "p95": max(p95s) if p95s else None,
        }
    return ttft


def _merged_sums(group: Sequence[dict[str, Any]]) -> MergedSums:
    """Consecutive buckets as one: their sums added (`contract_sums`), the largest
    replica count, the TTFT approximations above."""
    sums: dict[str, float] = {}
    for bucket in group:
        for name, value in contract_sums(bucket).items():
            sums[name] = sums.get(name, 0) + value
    distinct = sums.pop("distinct_prefixes")
    replicas = max(b.get("replicas") or 0 for b in group)
    return MergedSums(sums, replicas, distinct, _ttft(group))


def merge_buckets(buckets: Sequence[dict[str, Any]], max_points: int) -> list[dict[str, Any]]:
    """At most `max_points` buckets: groups of consecutive buckets merged."""
    if len(buckets) <= max_points:
        return list(buckets)
    factor = -(-len(buckets) // max_points)
    groups = [buckets[i : i + factor] for i in range(0, len(buckets), factor)]
    # The figures are taken again from the added sums by the read API's own shape.
    merged = metric_values_of([_merged_sums(group) for group in groups])
    return [{"ts": group[0]["ts"], **m} for group, m in zip(groups, merged, strict=True)]
