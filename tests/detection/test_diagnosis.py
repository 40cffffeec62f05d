"""Unit tests of service.detection.diagnosis on hand-built before/after stretches.

They prove the cause precedence of contract section 5 (a falling ceiling means
history_rewrite or prefix_instability; otherwise the rewarm cause holding the most
rewarm tokens after the change; otherwise unknown), that a segment counts as
"became varied" only when its share of distinct values per request doubles by 10
points, and that every evidence line carries the checkable numbers (hit rate,
cacheable fraction, unique_prefix_ratio, variants per hour of a segment, rewarm
shares by cause, replica counts).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from service.detection.diagnosis import (
    Diagnosis,
    SegmentVariants,
    cause_of,
    diagnose,
    evidence_of,
    recovery_evidence,
)
from service.detection.series import Stretch

NO_VARIANTS = SegmentVariants({}, (1000.0, 1000.0))


def stretch(**changes: Any) -> Stretch:
    """A healthy stretch: 70% hit rate under an 80% ceiling, few rewarms, 1 replica."""
    base = Stretch(
        hit_rate=0.70,
        cacheable_fraction=0.80,
        rewarm_share=0.05,
        unique_prefix_ratio=0.01,
        history_rewrite_share=None,
        opening_cacheable_fraction=None,
        rewarm_tokens={"concurrent": 0, "routing": 0, "eviction": 0, "unknown": 0},
        replicas=1,
    )
    return replace(base, **changes)


def rewarms(**tokens: int) -> dict[str, int]:
    return {"concurrent": 0, "routing": 0, "eviction": 0, "unknown": 0, **tokens}


# --- cause ------------------------------------------------------------------------


def test_a_ceiling_falling_with_the_hit_rate_is_prefix_instability() -> None:
    after = stretch(
        hit_rate=0.12,
        cacheable_fraction=0.14,
        unique_prefix_ratio=0.97,
        rewarm_tokens=rewarms(routing=900),  # rewarms do not matter once the ceiling fell
    )
    assert cause_of(stretch(), after) == "prefix_instability"


def test_a_ceiling_falling_by_half_the_drop_is_enough() -> None:
    # hit rate -40 points, ceiling -21 points (>= 20): the start changed.
    after = stretch(hit_rate=0.30, cacheable_fraction=0.59, rewarm_tokens=rewarms(eviction=5))
    assert cause_of(stretch(), after) == "prefix_instability"


def test_a_ceiling_falling_by_less_than_half_the_drop_goes_to_the_rewarm_causes() -> None:
    # hit rate -40 points, ceiling -19 points (< 20).
    after = stretch(hit_rate=0.30, cacheable_fraction=0.61, rewarm_tokens=rewarms(eviction=5))
    assert cause_of(stretch(), after) == "eviction"


def test_rewritten_histories_with_intact_openers_are_history_rewrite() -> None:
    before = stretch(history_rewrite_share=0.02, opening_cacheable_fraction=0.80)
    after = stretch(
        hit_rate=0.30,
        cacheable_fraction=0.35,
        history_rewrite_share=0.60,
        opening_cacheable_fraction=0.78,  # fell by 2 points: the shared start is intact
    )
    assert cause_of(before, after) == "history_rewrite"


def test_rewrites_with_openers_losing_their_prefix_too_are_prefix_instability() -> None:
    before = stretch(history_rewrite_share=0.02, opening_cacheable_fraction=0.80)
    after = stretch(
        hit_rate=0.30,
        cacheable_fraction=0.35,
        history_rewrite_share=0.60,
        opening_cacheable_fraction=0.70,  # fell by 10 points
    )
    assert cause_of(before, after) == "prefix_instability"


def test_rewrites_rising_by_less_than_20_points_are_prefix_instability() -> None:
    before = stretch(history_rewrite_share=0.10, opening_cacheable_fraction=0.80)
    after = stretch(
        hit_rate=0.30,
        cacheable_fraction=0.35,
        history_rewrite_share=0.29,
        opening_cacheable_fraction=0.80,
    )
    assert cause_of(before, after) == "prefix_instability"


def test_rewrites_without_opening_figures_count_the_openers_as_intact() -> None:
    after = stretch(hit_rate=0.30, cacheable_fraction=0.35, history_rewrite_share=0.5)
    assert cause_of(stretch(history_rewrite_share=0.0), after) == "history_rewrite"
    # No session figures before at all: a share of 0.
    assert cause_of(stretch(), after) == "history_rewrite"


def test_rewrites_rising_by_exactly_20_points_are_history_rewrite() -> None:
    before = stretch(history_rewrite_share=1 / 10, opening_cacheable_fraction=0.80)
    after = stretch(
        hit_rate=0.30,
        cacheable_fraction=0.35,
        history_rewrite_share=3 / 10,
        opening_cacheable_fraction=0.80,
    )
    assert cause_of(before, after) == "history_rewrite"


@pytest.mark.parametrize(
    ("tokens", "cause"),
    [
        pytest.param(rewarms(concurrent=700, routing=200, eviction=100), "cold_fanout"),
        pytest.param(rewarms(concurrent=100, routing=700, eviction=200), "routing"),
        pytest.param(rewarms(concurrent=100, routing=200, eviction=700), "eviction"),
        pytest.param(rewarms(unknown=700, routing=200), "unknown"),
    ],
)
def test_an_intact_ceiling_names_the_rewarm_cause_holding_the_most_tokens(
    tokens: dict[str, int], cause: str
) -> None:
    after = stretch(hit_rate=0.30, cacheable_fraction=0.78, rewarm_tokens=tokens)
    assert cause_of(stretch(), after) == cause


def test_the_rewarm_tokens_before_the_change_do_not_decide() -> None:
    before = stretch(rewarm_tokens=rewarms(eviction=10_000))
    after = stretch(hit_rate=0.30, rewarm_tokens=rewarms(routing=300, eviction=100))
    assert cause_of(before, after) == "routing"


def test_no_ceiling_and_no_rewarms_is_unknown() -> None:
    assert cause_of(stretch(), stretch(hit_rate=0.30)) == "unknown"
    unfingerprinted = stretch(cacheable_fraction=None, unique_prefix_ratio=None)
    assert cause_of(unfingerprinted, replace(unfingerprinted, hit_rate=0.2)) == "unknown"


def test_without_a_ceiling_after_the_change_the_rewarms_decide() -> None:
    after = stretch(hit_rate=0.2, cacheable_fraction=None, rewarm_tokens=rewarms(routing=1))
    assert cause_of(stretch(), after) == "routing"


# --- segment variants -------------------------------------------------------------


def test_a_segment_that_became_unique_is_varied_and_one_following_traffic_is_not() -> None:
    variants = SegmentVariants(
        {
            "system": (1.0, 980.0),  # 0.1% -> 98% of requests
            "message[0]": (300.0, 600.0),  # 30% -> 30%: twice the sessions, twice the traffic
            "tools": (2.0, 400.0),  # 0.2% -> 20%
            "response_format": (1.0, 180.0),  # 0.1% -> 9%: more than doubled, < 10 points
        },
        (1000.0, 2000.0),
    )
    assert variants.became_varied() == [("system", 1.0, 980.0), ("tools", 2.0, 400.0)]


def test_a_share_must_both_double_and_move_10_points() -> None:
    variants = SegmentVariants(
        {
            "a": (100.0, 250.0),  # 10% -> 25%
            "b": (60.0, 100.0),  # 6% -> 10%: neither
            "c": (400.0, 700.0),  # 40% -> 70%: 30 points but not doubled
            "d": (40.0, 90.0),  # 4% -> 9%: doubled but 5 points
        },
        (1000.0, 1000.0),
    )
    assert variants.became_varied() == [("a", 100.0, 250.0)]


def test_shares_are_capped_at_one_and_rates_floored_at_one_request() -> None:
    # 500 variants on 100 requests is a share of 1; with no traffic the rate counts as 1.
    capped = SegmentVariants({"system": (60.0, 500.0)}, (100.0, 100.0))
    assert capped.became_varied() == []  # 60% -> 100%: not doubled
    idle = SegmentVariants({"system": (0.0, 1.0)}, (0.0, 0.0))
    assert idle.became_varied() == [("system", 0.0, 1.0)]


# --- evidence ---------------------------------------------------------------------


def test_evidence_of_a_prefix_instability_carries_its_numbers() -> None:
    before = stretch()
    after = stretch(
        hit_rate=0.12, cacheable_fraction=0.14, rewarm_share=0.02, unique_prefix_ratio=0.97
    )
    variants = SegmentVariants(
        {"system": (1.0, 980.0), "message[0]": (300.0, 310.0)}, (1000.0, 1000.0)
    )
    assert evidence_of(before, after, variants) == [
        "hit rate 70% -> 12%; cacheable fraction 80% -> 14%",
        "unique_prefix_ratio 0.01 -> 0.97 (distinct request starts per request)",
        "segment `system` had 1 variant per hour before and 980 after",
    ]


def test_a_small_unique_prefix_ratio_change_is_left_out() -> None:
    lines = evidence_of(stretch(), stretch(unique_prefix_ratio=0.05), NO_VARIANTS)
    assert lines == ["hit rate 70% -> 70%; cacheable fraction 80% -> 80%"]
    lines = evidence_of(stretch(), stretch(unique_prefix_ratio=0.07), NO_VARIANTS)
    assert lines[1] == "unique_prefix_ratio 0.01 -> 0.07 (distinct request starts per request)"


def test_at_most_three_varied_segments_most_changed_first_with_plurals() -> None:
    variants = SegmentVariants(
        {
            "a": (0.0, 200.0),
            "b": (2.0, 900.0),
            "c": (0.0, 500.0),
            "d": (0.0, 300.0),
        },
        (1000.0, 1000.0),
    )
    segment_lines = [
        line
        for line in evidence_of(stretch(), stretch(hit_rate=0.2), variants)
        if line.startswith("segment")
    ]
    assert segment_lines == [
        "segment `b` had 2 variants per hour before and 900 after",
        "segment `c` had 0 variants per hour before and 500 after",
        "segment `d` had 0 variants per hour before and 300 after",
    ]


def test_evidence_of_a_history_rewrite_gives_both_shares_and_the_openers() -> None:
    before = stretch(history_rewrite_share=0.02, opening_cacheable_fraction=0.80)
    after = stretch(
        hit_rate=0.30,
        cacheable_fraction=0.35,
        history_rewrite_share=0.60,
        opening_cacheable_fraction=0.78,
    )
    assert evidence_of(before, after, NO_VARIANTS) == [
        "hit rate 70% -> 30%; cacheable fraction 80% -> 35%",
        "history rewrites: 2% of continuing session requests before, 60% after; "
        "opening requests' cacheable fraction 80% -> 78%",
    ]


def test_evidence_of_a_routing_drop_gives_rewarm_shares_and_replica_counts() -> None:
    after = stretch(
        hit_rate=0.30,
        cacheable_fraction=0.78,
        rewarm_share=0.45,
        rewarm_tokens=rewarms(routing=750, eviction=200, concurrent=50),
        replicas=4,
    )
    assert evidence_of(stretch(), after, NO_VARIANTS) == [
        "hit rate 70% -> 30%; cacheable fraction 80% -> 78%",
        "rewarm share 5% -> 45%; rewarm tokens after the change by cause: "
        "routing 75%, eviction 20%, concurrent 5%",
        "replicas serving: 1 -> 4",
    ]


def test_missing_figures_read_n_a() -> None:
    before = stretch(cacheable_fraction=None, history_rewrite_share=0.1)
    after = stretch(hit_rate=0.2, cacheable_fraction=None, unique_prefix_ratio=None)
    assert evidence_of(before, after, NO_VARIANTS) == [
        "hit rate 70% -> 20%; cacheable fraction n/a -> n/a",
        "history rewrites: 10% of continuing session requests before, n/a after; "
        "opening requests' cacheable fraction n/a -> n/a",
    ]


def test_diagnose_is_cause_and_evidence_together() -> None:
    after = stretch(
        hit_rate=0.25,
        rewarm_share=0.5,
        rewarm_tokens=rewarms(concurrent=600, routing=400),
    )
    assert diagnose(stretch(), after, NO_VARIANTS) == Diagnosis(
        "cold_fanout",
        [
            "hit rate 70% -> 25%; cacheable fraction 80% -> 80%",
            "rewarm share 5% -> 50%; rewarm tokens after the change by cause: "
            "concurrent 60%, routing 40%",
        ],
    )


# --- how it recovered -------------------------------------------------------------


def test_a_recovery_onto_fewer_replicas_says_the_traffic_is_concentrated() -> None:
    """sglang-router's cache_aware in the lab: round-robin over 4 replicas, then every
    request on one (docs/lab.md)."""
    during = stretch(hit_rate=0.66, replicas=4)
    (line,) = recovery_evidence(during, stretch(hit_rate=0.91, replicas=1))
    assert line.startswith("since the recovery 1 of the 4 replicas serves each bucket")
    assert "hot spot" in line


@pytest.mark.parametrize("replicas", [4, 5, 0])
def test_a_recovery_on_as_many_replicas_or_unknown_ones_adds_nothing(replicas: int) -> None:
    assert recovery_evidence(stretch(replicas=4), stretch(replicas=replicas)) == []
    assert recovery_evidence(stretch(replicas=4), None) == []


def test_diagnose_ends_its_evidence_with_how_it_recovered() -> None:
    during = stretch(hit_rate=0.66, replicas=4)
    found = diagnose(stretch(), during, NO_VARIANTS, stretch(replicas=1))
    assert found.evidence[-1].startswith("since the recovery 1 of the 4 replicas")
    assert diagnose(stretch(), during, NO_VARIANTS).evidence == evidence_of(
        stretch(), during, NO_VARIANTS
    )
