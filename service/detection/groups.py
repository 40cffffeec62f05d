"""Regressions of groups and canaries (contract sections 5 and 5a), as pure functions
over the groups' detection series.

A group (a scenario, one of the busiest tenants) is watched with the service's own
lasting-drop rule: its drop is a regression of its own unless the whole service
dropped at the same time (`explained_by_service`): one change of the whole service is
one regression, not one per group. A scenario holding 5% of a service's tokens that
loses its prefix moves the service by a few points, below every threshold, and is
found only here.

A canary is not a change in time but a difference side by side: while two deploy
tags of one (service, model) serve in the same buckets, the newer tag (first seen
later) is compared with the older one that served the most beside it, over the
buckets both served (`canaries`). Both sides see the same hours, the same load and
the same cache (the scope of reuse is the model), so the difference is the release's.
The rule is the regression's: the newer tag's hit rate is lower by `min_abs` and
`min_rel` over those buckets, and below half-way in at least `min_buckets` of them:
lasting, not one cold bucket. It is found while the canary is small, `min_buckets`
buckets after its first request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt
import polars as pl

from service.analytics.definitions import SUM_COLUMNS, USD_COLUMNS
from service.detection.changepoints import (
    Drop,
    DropRule,
    WeightedMeanCost,
    lasting_drops,
    noise_sigma,
)
from service.detection.series import Series, Stretch, stretch

_EPSILON = 1e-9
K = TypeVar("K")
_TYPES = {c: np.float64 if c in USD_COLUMNS else np.int64 for c in SUM_COLUMNS}


def series_from_chart(rows: pl.DataFrame) -> Series:
    """A detection series from chart rows of one group, one row per detection bucket
    (bucket_us, the sums, replica_count, prefix_count): empty buckets left out, as
    `build_series` leaves them out."""
    rows = rows.filter(pl.col("prompt_tokens") > 0).sort("bucket_us")
    return Series(
        bucket_us=rows["bucket_us"].to_numpy().astype(np.int64),
        sums={c: rows[c].to_numpy().astype(_TYPES[c]) for c in SUM_COLUMNS},
        distinct_prefixes=rows["prefix_count"].to_numpy().astype(np.int64),
        replicas=rows["replica_count"].to_numpy().astype(np.int64),
    )


def change_us(series: Series, drop: Drop) -> int:
    """When a drop of the series began (its bucket's start)."""
    return int(series.bucket_us[drop.at])


#: How far a sparse group's change estimate may be from its service's and still be
#: the same change: most fall within a few buckets, the sparsest within an hour.
SAME_CHANGE_US = 3600 * 1_000_000


def explained_by_service(group_us: int, service_us: list[int], reach_us: int) -> bool:
    """A group's drop that a drop of the whole service explains: the two changes are
    within max(`reach_us`, SAME_CHANGE_US) of each other. A sparse group's change
    point is less precise than its service's, hence the hour; a group that falls on
    its own while the service is still down from an earlier change is its own."""
    near = max(reach_us, SAME_CHANGE_US)
    return any(abs(group_us - other) <= near for other in service_us)


def _residual(group: Series, service: Series) -> npt.NDArray[np.float64]:
    """The group's hit rate minus its service's, bucket by bucket (the group's
    buckets are among its service's)."""
    at = np.minimum(np.searchsorted(service.bucket_us, group.bucket_us), len(service) - 1)
    return group.hit_rate - service.hit_rate[at]


def _fell_apart(
    residual: npt.NDArray[np.float64], weight: npt.NDArray[np.float64], drop: Drop, rule: DropRule
) -> bool:
    """The group fell against its service across the drop, by at least half the
    reportable drop: a noisy group's dip that its service shares is not its own."""

    def level(start: int, end: int) -> float:
        w = weight[start:end]
        return float((residual[start:end] * w).sum() / max(w.sum(), 1e-12))

    fall = level(drop.before.start, drop.before.end) - level(drop.after.start, drop.after.end)
    return fall + _EPSILON >= rule.min_abs / 2


#: How many standard errors a group's fall must span (`_stands_out`).
STANDARD_ERRORS = 3.0


def _stands_out(series: Series, drop: Drop) -> bool:
    """The fall is more than the group's request count lets chance make: at least
    STANDARD_ERRORS standard errors of a difference of two proportions, each request
    a hit or not, over the requests before and after. A tenant with a request every
    other bucket has three buckets below half-way by chance; a scenario whose every
    request stopped hitting does not."""
    requests = series.sums["requests"]
    n_before = float(requests[drop.before.start : drop.before.end].sum())
    n_after = float(requests[drop.after.start : drop.after.end].sum())
    if n_before <= 0 or n_after <= 0:
        return False
    was, now = drop.before.level, drop.after.level
    pooled = min(max((was * n_before + now * n_after) / (n_before + n_after), 0.0), 1.0)
    error = math.sqrt(pooled * (1 - pooled) * (1 / n_before + 1 / n_after))
    return was - now >= STANDARD_ERRORS * error


def moved_apart(group: Series, service: Series, rule: DropRule) -> bool:
    """Whether the group's hit rate changed relative to its service's: the residual
    series (group minus service, bucket by bucket, weighted by the group's tokens)
    has a change point by Binseg's own first test (the best single split's gain
    above the penalty `segments` uses). A group that only ever moved with its
    service has no drop the service does not explain, and is not searched further:
    most groups, most of the time, so watching 30 groups costs far less than 30
    times the service's search."""
    n = len(group)
    if n < 2 * rule.min_buckets:
        return False
    residual = _residual(group, service)
    w = group.weight / group.weight.mean()
    sigma = max(noise_sigma(residual, w), rule.sigma_floor)
    penalty = rule.beta * sigma * sigma * math.log(n)
    cost = WeightedMeanCost().fit(np.column_stack([residual, w]))
    splits = np.arange(rule.min_buckets, n - rule.min_buckets + 1)
    gains = cost.error(0, n) - cost.errors(0, splits) - cost.errors(splits, n)
    return bool(gains.max() > penalty)


def group_drops(
    service: Series,
    service_changes_us: list[int],
    groups: dict[K, Series],
    rule: DropRule,
    reach_us: int,
) -> dict[K, list[Drop]]:
    """Per group, its lasting drops that the service's own (`service_changes_us`) do not
    explain; only the groups that moved apart from the service are searched."""
    found: dict[K, list[Drop]] = {}
    for key, series in groups.items():
        if not len(series) or not moved_apart(series, service, rule):
            continue
        residual = _residual(series, service)
        drops = [
            drop
            for drop in lasting_drops(series.hit_rate, series.weight, rule, series.wait)
            if _fell_apart(residual, series.weight, drop, rule)
            and _stands_out(series, drop)
            and not explained_by_service(change_us(series, drop), service_changes_us, reach_us)
        ]
        if drops:
            found[key] = drops
    return found


def _subset(series: Series, keep: npt.NDArray[np.bool_]) -> Series:
    return Series(
        bucket_us=series.bucket_us[keep],
        sums={name: values[keep] for name, values in series.sums.items()},
        distinct_prefixes=series.distinct_prefixes[keep],
        replicas=series.replicas[keep],
    )


@dataclass(frozen=True)
class Canary:
    """A newer tag whose hit rate is lower than the older one's beside it."""

    tag: str
    baseline: str
    first_bucket_us: int  # the newer tag's first bucket in the series
    buckets: int  # buckets both served
    share: float  # the newer tag's share of both tags' requests in those buckets
    before: Stretch  # the older tag over those buckets
    after: Stretch  # the newer tag over those buckets
    after_series: Series  # the newer tag over those buckets, bucket by bucket
    recovered_at_us: int | None


def canaries(tags: dict[str, Series], rule: DropRule, bucket_us: int) -> list[Canary]:
    """Every newer tag that, beside the older tag that served the most in its
    buckets, has the lower hit rate by the rule (see the module's docstring)."""
    order = sorted((s.bucket_us[0], tag) for tag, s in tags.items() if len(s))
    found = []
    for i, (_, tag) in enumerate(order):
        newer = tags[tag]
        older = [t for _, t in order[:i]]
        if not older:
            continue
        baseline = max(older, key=lambda t: (_tokens_beside(tags[t], newer), t))
        canary = _compare(tag, newer, baseline, tags[baseline], rule, bucket_us)
        if canary is not None:
            found.append(canary)
    return found


def _tokens_beside(series: Series, other: Series) -> int:
    return int(series.sums["prompt_tokens"][np.isin(series.bucket_us, other.bucket_us)].sum())


def _compare(
    tag: str, newer: Series, baseline: str, older: Series, rule: DropRule, bucket_us: int
) -> Canary | None:
    both = np.intersect1d(newer.bucket_us, older.bucket_us)
    if len(both) < rule.min_buckets:
        return None
    new = _subset(newer, np.isin(newer.bucket_us, both))
    old = _subset(older, np.isin(older.bucket_us, both))
    before, after = stretch(old, 0, len(old)), stretch(new, 0, len(new))
    fall = before.hit_rate - after.hit_rate + _EPSILON
    if fall < rule.min_abs or fall < rule.min_rel * before.hit_rate:
        return None
    midpoint = (before.hit_rate + after.hit_rate) / 2
    if int((new.hit_rate <= midpoint).sum()) < rule.min_buckets:
        return None
    requests = new.sums["requests"].sum() + old.sums["requests"].sum()
    return Canary(
        tag=tag,
        baseline=baseline,
        first_bucket_us=int(newer.bucket_us[0]),
        buckets=len(both),
        share=float(new.sums["requests"].sum() / max(requests, 1)),
        before=before,
        after=after,
        after_series=new,
        recovered_at_us=_recovered(new, old, newer, older, fall, rule, bucket_us),
    )


def _recovered(
    new: Series,
    old: Series,
    newer: Series,
    older: Series,
    fall: float,
    rule: DropRule,
    bucket_us: int,
) -> int | None:
    """When the canary stopped hurting: its newest `min_buckets` buckets beside the
    older tag are back near it (a fix shipped under the same tag), or it stopped
    serving while the older tag went on (rolled back). A canary that replaced the
    older tag stays open: the service's own series carries the drop from there."""
    recent = slice(len(new) - rule.min_buckets, len(new))
    now_old = stretch(old, recent.start, recent.stop).hit_rate
    now_new = stretch(new, recent.start, recent.stop).hit_rate
    if now_old - now_new < max(rule.min_abs / 2, fall / 4):
        return int(new.bucket_us[recent.start])
    if older.bucket_us[-1] > newer.bucket_us[-1]:
        return int(newer.bucket_us[-1]) + bucket_us
    return None
