"""Regressions of groups (contract sections 5 and 5c), as pure
functions over the groups' detection series.

A group (a scenario, one of the busiest tenants) is judged as a series of its own
(`service.detection.drops`: its seasons, its lulls, its counts), and then against
its service: its drop is a regression only when it fell against the rest of the
service over the same buckets (`fell_against_rest`): a tenant whose 3 evening
requests expire with the rest of the model's traffic did not fall against it. It is
also not its own when the whole service dropped at the same time
(`explained_by_service`): one change of the whole service is one regression, not
one per group. A scenario holding 5% of a service's tokens that loses its prefix
moves the service by a few points, below every threshold, and is found only here.

Canaries (a newer deploy tag beside the one it replaced) are
`service.detection.canaries`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import numpy.typing as npt
import polars as pl

from service.analytics.definitions import SUM_COLUMNS, USD_COLUMNS
from service.detection.changepoints import Drop, DropRule, WeightedMeanCost, noise_sigma
from service.detection.diagnosis import UNKNOWN, drop_cause
from service.detection.drops import find_drops
from service.detection.series import Series

EPSILON = 1e-9
K = TypeVar("K")
Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]
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


@dataclass(frozen=True)
class ServiceChange:
    """A lasting drop of the whole service: when it began, when it recovered (None:
    still down) and its cause."""

    at_us: int
    until_us: int | None
    cause: str


def explained_by_service(
    group_us: int, group_cause: str, changes: list[ServiceChange], reach_us: int
) -> bool:
    """A group's drop that a drop of the whole service explains (one change, one
    regression): the two changes are within max(`reach_us`, SAME_CHANGE_US) of each
    other (a sparse group's change point is less precise than its service's, hence
    the hour), or the group fell while its service was down from a change of the same
    known cause (a slow erosion of the whole service reaches each customer on its own
    day; two drops the figures do not explain are not one cause).
    A group that falls for another cause while its service is down is its own."""
    near = max(reach_us, SAME_CHANGE_US)
    for change in changes:
        if abs(group_us - change.at_us) <= near:
            return True
        during = change.at_us <= group_us and (
            change.until_us is None or group_us < change.until_us
        )
        if during and change.cause == group_cause != UNKNOWN:
            return True
    return False


def rest_of(service: Series, group: Series) -> Series:
    """The service without the group, at the group's buckets (which are among its
    service's): the traffic the group is judged against."""
    at = np.searchsorted(service.bucket_us, group.bucket_us)
    at = np.minimum(at, len(service) - 1)
    sums = {name: service.sums[name][at] - group.sums[name] for name in service.sums}
    return Series(group.bucket_us, sums, group.distinct_prefixes, group.replicas)


def without(service: Series, group: Series) -> Series:
    """The service without the group, at every one of the service's buckets."""
    at = np.searchsorted(service.bucket_us, group.bucket_us)
    sums = {name: values.copy() for name, values in service.sums.items()}
    for name, values in sums.items():
        np.subtract.at(values, at, group.sums[name])
    return Series(service.bucket_us, sums, service.distinct_prefixes, service.replicas)


def _residual(group: Series, rest: Series) -> tuple[Floats, Bools]:
    """The group's hit rate minus the rest of its service's, bucket by bucket, and
    where the rest had traffic at all."""
    has_rest = rest.sums["prompt_tokens"] > 0
    return group.hit_rate - np.where(has_rest, rest.hit_rate, group.hit_rate), has_rest


def fell_against_rest(group: Series, rest: Series, drop: Drop, rule: DropRule) -> bool:
    """Contract section 5c: the group fell against its own service over the same
    buckets. The residual (group minus the rest of the service, bucket by bucket,
    weighted by the group's tokens) falls across the drop by the rule's amounts and by
    `rule.z_score` standard errors of both sides' counts. A group that moves with its
    service (a quiet evening, a lull of the whole model) has a flat residual, however
    far it fell; a group whose service rose around it did not fall. Each side needs
    `rule.min_buckets` buckets where the rest has traffic: a sparse tenant's evening
    with nobody else about says nothing of the service."""
    residual, has_rest = _residual(group, rest)

    def side(start: int, end: int) -> tuple[float, float, float] | None:
        keep = np.arange(start, end)[has_rest[start:end]]
        w = group.weight[keep]
        if len(keep) < rule.min_buckets or w.sum() <= 0:
            return None
        level = float((residual[keep] * w).sum() / w.sum())
        own = float((group.hit_rate[keep] * w).sum() / w.sum())
        variance = binomial_variance(group, keep, own) + binomial_variance(rest, keep, own - level)
        return level, own, float((w * w * variance).sum() / w.sum() ** 2)

    before, after = side(drop.before.start, drop.before.end), side(drop.after.start, drop.after.end)
    if before is None or after is None:
        return False  # too few buckets where the rest of the service has traffic to tell
    (was, was_own, was_var), (now, now_own, now_var) = before, after
    fall = was - now + EPSILON
    if fall < rule.min_abs or fall < rule.min_rel * was_own:
        return False
    if fall < OWN_SHARE * (was_own - now_own):
        return False
    return fall >= rule.z_score * math.sqrt(was_var + now_var)


#: A group's fall must be at least this share its own, not its service's: a tenant
#: that fell by 0.37 while the rest of the service fell by 0.24 (an erosion reaching
#: every customer) moved with its service, however its noise made the residual look.
OWN_SHARE = 0.5


def binomial_variance(series: Series, index: npt.NDArray[np.intp], level: float) -> Floats:
    """Per bucket of `index`, the variance of a hit rate near `level` over the
    bucket's requests (binomial; the level kept off 0 and 1)."""
    p = min(max(level, 0.01), 0.99)
    return np.asarray(p * (1 - p) / np.maximum(series.sums["requests"][index], 1))


def moved_apart(group: Series, rest: Series, rule: DropRule) -> bool:
    """Whether the group's hit rate changed relative to the rest of its service: the
    residual series (bucket by bucket, weighted by the group's tokens) has a change
    point by Binseg's own first test (the best single split's gain above the penalty
    `segments` uses). A group that only ever moved with its service has no drop the
    service does not explain, and is not searched further: most groups, most of the
    time, so watching 30 groups costs far less than 30 times the service's search."""
    n = len(group)
    if n < 2 * rule.min_buckets:
        return False
    residual, _ = _residual(group, rest)
    w = group.weight / group.weight.mean()
    sigma = max(noise_sigma(residual, w), rule.sigma_floor)
    penalty = rule.beta * sigma * sigma * math.log(n)
    cost = WeightedMeanCost().fit(np.column_stack([residual, w]))
    splits = np.arange(rule.min_buckets, n - rule.min_buckets + 1)
    gains = cost.error(0, n) - cost.errors(0, splits) - cost.errors(splits, n)
    return bool(gains.max() > penalty)


def group_drops(
    service: Series,
    service_changes: list[ServiceChange],
    groups: dict[K, Series],
    rule: DropRule,
    reach_us: int,
    bucket_s: int,
) -> dict[K, list[Drop]]:
    """Per group, its lasting drops (judged as a series of its own: seasons, lulls,
    counts) that fell against the rest of the service and that the service's own
    drops (`service_changes`) do not explain; only the groups that moved apart from
    the rest of the service are searched.

    A drop that starts while the group is still down from one the service explains,
    from a brief rise, is that one going on, whatever its diagnosis: a tenant whose
    service broke at noon, a few of its requests back up in the evening and down
    again at night (its night's traffic one rewriting agent session), is still down
    from noon. A group that broke again from a level it held is its own."""
    found: dict[K, list[Drop]] = {}
    for key, series in groups.items():
        if not len(series):
            continue
        rest = rest_of(service, series)
        if not moved_apart(series, rest, rule):
            continue
        drops = find_drops(series, bucket_s, rule)
        by_service = [
            d
            for d in drops
            if explained_by_service(
                change_us(series, d), drop_cause(series, d), service_changes, reach_us
            )
        ]
        own = [
            d
            for d in drops
            if d not in by_service
            and not _down_from(by_service, d, rule)
            and fell_against_rest(series, rest, d, rule)
        ]
        if own:
            found[key] = own
    return found


def _down_from(earlier: list[Drop], drop: Drop, rule: DropRule) -> bool:
    """Whether `drop` starts while the series is still down from one of `earlier`,
    from a side before too short to be a level of its own (fewer buckets than a
    recovery holds): a brief rise inside that drop, not a new normal it broke."""
    if drop.before.end - drop.before.start >= rule.recovery_buckets:
        return False
    return any(
        e.at < drop.at and (e.recovered_at is None or drop.at < e.recovered_at) for e in earlier
    )


def explained_by_groups(
    found: dict[K, tuple[Series, list[Drop]]], overlap: Callable[[K, K], bool]
) -> dict[K, tuple[Series, list[Drop]]]:
    """The groups' drops without those another group's explains: a deeper drop of the
    same cause of a group that shares traffic with it (`overlap`: a tenant and a
    scenario it sends), begun no later and still down. A tenant's break seen again
    through its scenario once the evening leaves the tenant most of the scenario's
    traffic is one change, one regression: the tenant's."""
    changes = [
        (key, change_us(series, d), _recovered_us(series, d), drop_cause(series, d), d.fall)
        for key, (series, drops) in found.items()
        for d in drops
    ]
    kept: dict[K, tuple[Series, list[Drop]]] = {}
    for key, (series, drops) in found.items():
        own = []
        for d in drops:
            at, cause = change_us(series, d), drop_cause(series, d)
            explained = any(
                other != key
                and overlap(key, other)
                and other_cause == cause
                and fall > d.fall
                and other_at <= at
                and (until is None or at < until)
                for other, other_at, until, other_cause, fall in changes
            )
            if not explained:
                own.append(d)
        if own:
            kept[key] = (series, own)
    return kept


def _recovered_us(series: Series, drop: Drop) -> int | None:
    return None if drop.recovered_at is None else int(series.bucket_us[drop.recovered_at])
