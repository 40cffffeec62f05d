"""Unit tests of service.detection.groups.fell_against_rest: a group's drop is its own
only when it fell against the rest of its service over the same buckets, with
enough of those buckets on each side to tell (contract section 5c)."""

from __future__ import annotations

import numpy as np

from service.analytics.definitions import SUM_COLUMNS
from service.detection.changepoints import Drop, DropRule, Segment
from service.detection.groups import (
    ServiceChange,
    explained_by_groups,
    fell_against_rest,
    group_drops,
    rest_of,
)
from service.detection.series import Series

RULE = DropRule()
N = 48  # 4 hours of 5-minute buckets: the drop at 24


def series(hit_rate: list[float], tokens: list[float]) -> Series:
    """A series with these hit rates and prompt tokens (a request per 1,000 tokens)."""
    n = len(hit_rate)
    prompt = np.asarray(tokens, dtype=np.int64)
    sums = {c: np.zeros(n, dtype=np.int64) for c in SUM_COLUMNS}
    sums["prompt_tokens"] = prompt
    sums["cached_tokens"] = (np.asarray(hit_rate) * prompt).astype(np.int64)
    sums["requests"] = np.maximum(prompt // 1000, 1)
    return Series(
        bucket_us=np.arange(n, dtype=np.int64) * 300_000_000,
        sums=sums,
        distinct_prefixes=np.ones(n, dtype=np.int64),
        replicas=np.ones(n, dtype=np.int64),
    )


def the_drop(before: float, after: float) -> Drop:
    return Drop(N // 2, Segment(0, N // 2, before, 1.0), Segment(N // 2, N, after, 1.0), None)


def judged(group_rates: list[float], rest_rates: list[float], rest_tokens: list[float]) -> bool:
    group = series(group_rates, [20_000.0] * N)
    rest = series(rest_rates, rest_tokens)
    service = Series(
        group.bucket_us,
        {c: group.sums[c] + rest.sums[c] for c in SUM_COLUMNS},
        group.distinct_prefixes,
        group.replicas,
    )
    return fell_against_rest(group, rest_of(service, group), the_drop(0.8, 0.2), RULE)


def test_a_group_that_fell_while_its_service_held_fell_against_it() -> None:
    assert judged([0.8] * 24 + [0.2] * 24, [0.7] * N, [200_000.0] * N)


def test_a_group_that_fell_with_its_service_did_not() -> None:
    """A lull of the whole model: the group's residual against the rest is flat."""
    assert not judged([0.8] * 24 + [0.2] * 24, [0.7] * 24 + [0.1] * 24, [200_000.0] * N)


def test_a_sparse_evening_with_nobody_else_about_says_nothing() -> None:
    """The rest of the service has no traffic after the group's drop but in 3
    buckets (fewer than the rule's 6): nothing to judge the group against, so not
    its own drop (before the fix the empty side read as a residual of 0)."""
    rest_tokens = [200_000.0] * 24 + [0.0] * 21 + [200_000.0] * 3
    assert not judged([0.8] * 24 + [0.2] * 24, [0.7] * N, rest_tokens)


# --- drops another change explains ---------------------------------------------------


def _with_rest(group: Series, rest: Series) -> Series:
    sums = {c: group.sums[c] + rest.sums[c] for c in SUM_COLUMNS}
    return Series(group.bucket_us, sums, group.distinct_prefixes, group.replicas)


def test_a_group_still_down_from_its_services_change_has_no_drop_of_its_own() -> None:
    """The service broke at bucket 100 and stays down; the group with it, a few of its
    buckets back up at 140 and down again at 148: still down from the service's
    change, not a change of its own."""
    group = series([0.8] * 100 + [0.2] * 40 + [0.6] * 8 + [0.1] * 52, [20_000.0] * 200)
    rest = series([0.7] * 100 + [0.3] * 100, [200_000.0] * 200)
    service = _with_rest(group, rest)
    at_us = int(service.bucket_us[100])
    changes = [ServiceChange(at_us, None, "prefix_instability")]
    found = group_drops(service, changes, {"g": group}, RULE, 900 * 1_000_000, 300)
    assert found == {}
    # Without the service's change, the fall at 148 is the group's own (the one at 100
    # moved with the rest of the service): the check is not vacuous.
    alone = group_drops(service, [], {"g": group}, RULE, 900 * 1_000_000, 300)
    assert [d.at for d in alone["g"]] == [148]


def test_a_group_that_breaks_again_from_a_level_it_held_is_its_own() -> None:
    """Down with its service since 100, the group held 0.2 for 4 hours (48 buckets,
    more than a recovery holds), then broke on its own: its own regression."""
    group = series([0.8] * 100 + [0.2] * 48 + [0.0] * 52, [20_000.0] * 200)
    rest = series([0.7] * 100 + [0.3] * 100, [200_000.0] * 200)
    service = _with_rest(group, rest)
    changes = [ServiceChange(int(service.bucket_us[100]), None, "prefix_instability")]
    found = group_drops(service, changes, {"g": group}, RULE, 900 * 1_000_000, 300)
    assert [d.at for d in found["g"]] == [148]


def test_a_groups_drop_a_deeper_one_of_an_overlapping_group_explains_is_not_its_own() -> None:
    """A tenant broke at 100 (to 0.0); its scenario fell at 120 (to 0.3), once the
    evening left the tenant most of it: the tenant's regression, not the scenario's.
    A group that shares no traffic with the tenant, or a drop of another cause, stays."""
    tenant = series([0.88] * 100 + [0.0] * 100, [20_000.0] * 200)
    scenario = series([0.88] * 120 + [0.3] * 80, [40_000.0] * 200)
    t_drop = Drop(100, Segment(0, 100, 0.88, 1.0), Segment(100, 200, 0.0, 1.0), None, 0.88)
    s_drop = Drop(120, Segment(0, 120, 0.88, 1.0), Segment(120, 200, 0.3, 1.0), None, 0.58)
    found = {("tenant", "t"): (tenant, [t_drop]), ("scenario", "s"): (scenario, [s_drop])}
    kept = explained_by_groups(found, lambda a, b: a[0] != b[0])
    assert list(kept) == [("tenant", "t")]
    assert len(explained_by_groups(found, lambda a, b: False)) == 2
