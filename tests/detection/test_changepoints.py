"""Unit tests of service.detection.changepoints (the search) on hand-built NumPy
series.

They prove that the token-weighted L2 cost is the weighted variance it claims to be,
that the noise estimate ignores level shifts, that the segmentation tiles the series,
merges near levels, joins ramps to the change they belong to, finds a short dip in a
long series (plain binary segmentation does not) and places each change exactly, and
that the vectorized search is ruptures' own. What a segment boundary is worth (the
drop rule) is tested in test_drops.py.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from service.detection.changepoints import (
    DropRule,
    Floats,
    Segment,
    VectorBinseg,
    WeightedMeanCost,
    _absorb_transitions,
    _crossing,
    _merge_close,
    busy,
    noise_sigma,
    segments,
)

RULE = DropRule()
BUSY = 1000.0  # prompt tokens of a busy bucket (only ratios of weights matter)


def steps(
    parts: list[tuple[float, int]], *, noise: float = 0.01, seed: int = 0, weight: float = BUSY
) -> tuple[Floats, Floats]:
    """A series of constant levels (level, buckets) plus Gaussian noise, equal weights."""
    rng = np.random.default_rng(seed)
    y = np.concatenate([np.full(n, level) for level, n in parts])
    y = y + rng.normal(0.0, noise, len(y))
    return y, np.full(len(y), weight)


def levels(parts: list[Segment]) -> list[tuple[int, int]]:
    return [(p.start, p.end) for p in parts]


# --- the cost -------------------------------------------------------------------


@st.composite
def weighted_series(draw: st.DrawFn) -> tuple[Floats, Floats, int, int]:
    n = draw(st.integers(1, 40))
    y = draw(st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n))
    w = draw(st.lists(st.floats(0.01, 100.0), min_size=n, max_size=n))
    start = draw(st.integers(0, n - 1))
    end = draw(st.integers(start + 1, n))
    return np.array(y), np.array(w), start, end


@settings(max_examples=80, deadline=None)
@given(weighted_series())
def test_weighted_cost_error_is_the_weighted_sum_of_squares_around_the_weighted_mean(
    case: tuple[Floats, Floats, int, int],
) -> None:
    y, w, start, end = case
    cost = WeightedMeanCost().fit(np.column_stack([y, w]))
    ys, ws = y[start:end], w[start:end]
    mean = float((ws * ys).sum() / ws.sum())
    expected = float((ws * (ys - mean) ** 2).sum())
    assert math.isclose(cost.error(start, end), expected, rel_tol=1e-7, abs_tol=1e-9)


def test_weighted_cost_of_an_empty_or_weightless_segment_is_zero() -> None:
    cost = WeightedMeanCost().fit(np.column_stack([[0.2, 0.9, 0.4], [0.0, 0.0, 5.0]]))
    assert cost.error(1, 1) == 0.0
    assert cost.error(0, 2) == 0.0  # no weight: nothing to explain
    assert cost.error(0, 3) == pytest.approx(0.0)  # only one weighted point


def test_a_bucket_with_one_percent_of_the_traffic_barely_moves_the_cost() -> None:
    y = np.array([0.7, 0.7, 0.1, 0.7, 0.7])
    busy = WeightedMeanCost().fit(np.column_stack([y, np.full(5, 1.0)])).error(0, 5)
    quiet_w = np.array([1.0, 1.0, 0.01, 1.0, 1.0])
    quiet = WeightedMeanCost().fit(np.column_stack([y, quiet_w])).error(0, 5)
    # busy: 0.6^2 * (1 - 1/5); quiet: w1 * w2 / (w1 + w2) * 0.6^2 with w1 = 0.01, w2 = 4.
    assert busy == pytest.approx(0.288)
    assert quiet == pytest.approx(0.01 * 4 / 4.01 * 0.36)
    assert quiet / busy < 0.013


# --- the noise estimate ---------------------------------------------------------


def test_noise_sigma_ignores_a_level_shift() -> None:
    y, w = steps([(0.7, 100), (0.2, 100)], noise=0.02, seed=3)
    assert np.std(y) > 0.2  # a plain standard deviation sees the shift
    assert noise_sigma(y, w / w.mean()) == pytest.approx(0.02, rel=0.1)


def test_noise_sigma_is_the_noise_at_mean_weight() -> None:
    # var(y_i) = sigma^2 / w_i with sigma = 0.03 and weights 0.2 .. 5, plus a shift.
    rng = np.random.default_rng(11)
    w = rng.uniform(0.2, 5.0, 2000)
    y = rng.normal(0.0, 0.03, 2000) / np.sqrt(w)
    y[1000:] += 0.4
    assert noise_sigma(y, w) == pytest.approx(0.03, rel=0.05)


def test_noise_sigma_needs_three_points_and_is_zero_on_a_flat_series() -> None:
    assert noise_sigma(np.array([0.1, 0.9]), np.ones(2)) == 0.0
    assert noise_sigma(np.full(10, 0.5), np.ones(10)) == 0.0


# --- segmentation ---------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 1.0), st.floats(0.05, 50.0)), min_size=1, max_size=60))
def test_segments_tile_the_series_and_carry_its_weighted_means(
    points: list[tuple[float, float]],
) -> None:
    y = np.array([p[0] for p in points])
    w = np.array([p[1] for p in points])
    parts = segments(y, w, RULE)
    assert parts[0].start == 0 and parts[-1].end == len(y)
    assert all(a.end == b.start for a, b in itertools.pairwise(parts))
    w_norm = w / w.mean()
    for p in parts:
        ys, ws = y[p.start : p.end], w_norm[p.start : p.end]
        assert p.weight == pytest.approx(float(ws.sum()))
        assert p.level == pytest.approx(float((ys * ws).sum() / ws.sum()))


def test_a_series_shorter_than_two_minimal_segments_is_not_cut() -> None:
    y = np.array([0.9] * 6 + [0.1] * 5)
    w = np.array([1.0] * 5 + [2.0] + [4.0] + [2.0] * 4)
    (only,) = segments(y, w, RULE)  # 11 buckets: not two of the rule's 6
    assert (only.start, only.end) == (0, 11)
    assert only.level == pytest.approx((0.9 * 7 + 0.1 * 12) / 19)
    assert segments(np.array([]), np.array([]), RULE) == []


def test_neighbours_closer_than_half_the_reportable_drop_are_merged() -> None:
    y = np.array([0.70] * 4 + [0.66] * 4 + [0.30] * 4)
    w = np.ones(12)
    parts = [Segment(0, 4, 0.70, 4.0), Segment(4, 8, 0.66, 4.0), Segment(8, 12, 0.30, 4.0)]
    merged = _merge_close(parts, y, w, RULE)
    assert levels(merged) == [(0, 8), (8, 12)]
    assert merged[0].level == pytest.approx(0.68)
    # 6 points apart (> min_abs / 2): kept apart.
    y2 = np.array([0.70] * 4 + [0.64] * 4)
    kept = _merge_close([Segment(0, 4, 0.70, 4.0), Segment(4, 8, 0.64, 4.0)], y2, w[:8], RULE)
    assert levels(kept) == [(0, 4), (4, 8)]


def test_a_short_segment_between_its_neighbours_joins_the_one_after_it() -> None:
    y = np.array([0.7] * 10 + [0.5, 0.4] + [0.2] * 10)
    w = np.ones(22)
    parts = [Segment(0, 10, 0.7, 10.0), Segment(10, 12, 0.45, 2.0), Segment(12, 22, 0.2, 10.0)]
    absorbed = _absorb_transitions(list(parts), y, w, RULE)
    assert levels(absorbed) == [(0, 10), (10, 22)]  # the change starts where the ramp starts
    assert absorbed[1].level == pytest.approx((0.5 + 0.4 + 0.2 * 10) / 12)
    # A short segment that is not between its neighbours (a dip) stays its own.
    dip = [Segment(0, 10, 0.7, 10.0), Segment(10, 12, 0.1, 2.0), Segment(12, 22, 0.7, 10.0)]
    assert levels(_absorb_transitions(list(dip), y, w, RULE)) == [(0, 10), (10, 12), (12, 22)]


# --- change points where they are -------------------------------------------------


def test_a_clean_step_is_cut_exactly_with_both_levels() -> None:
    y, w = steps([(0.8, 30), (0.2, 30)], noise=0.0)
    before, after = segments(y, w, RULE)
    assert (before.end, after.start) == (30, 30)
    assert (before.level, after.level) == (pytest.approx(0.8), pytest.approx(0.2))


def test_a_rise_and_a_fall_are_both_cut() -> None:
    y, w = steps([(0.3, 40), (0.7, 40), (0.2, 40)], seed=3)
    assert levels(segments(y, w, RULE)) == [(0, 40), (40, 80), (80, 120)]


def test_a_flat_noisy_series_is_one_segment_across_seeds() -> None:
    for seed in range(25):
        rng = np.random.default_rng(seed)
        w = rng.uniform(500.0, 1500.0, 288)  # a day of 5-minute buckets
        y = 0.6 + rng.normal(0.0, 0.6, 288) / np.sqrt(w)  # about 2 points of noise
        assert levels(segments(y, w, RULE)) == [(0, 288)], seed


@pytest.mark.parametrize("seed", range(4))
def test_a_short_dip_in_a_long_series_is_found_where_plain_binary_segmentation_misses_it(
    seed: int,
) -> None:
    """Two weeks of 5-minute buckets with a 40-minute break (8 buckets) rolled back:
    a single split at either edge gains too little to beat the penalty, the dip as a
    whole gains plenty."""
    y, w = steps([(0.72, 2000), (0.50, 8), (0.72, 2024)], noise=0.02, seed=seed)
    assert levels(segments(y, w, RULE)) == [(0, 2000), (2000, 2008), (2008, 4032)]
    import ruptures as rpt

    w_norm = w / w.mean()
    sigma = max(noise_sigma(y, w_norm), RULE.sigma_floor)
    penalty = RULE.beta * sigma * sigma * math.log(len(y))
    plain = rpt.Binseg(custom_cost=WeightedMeanCost(), min_size=RULE.min_buckets, jump=1)
    assert plain.fit(np.column_stack([y, w_norm])).predict(pen=penalty) == [len(y)]


def test_a_change_point_is_placed_exactly_however_the_search_found_it() -> None:
    """The demo's canary hour, then everyone: a change right after a small step is
    still dated at its own bucket (the refinement frees what the minimum segment size
    held; the hour between joins the change as its ramp, and the crossing dates it)."""
    y, w = steps([(0.85, 400), (0.75, 12), (0.006, 48), (0.86, 300)], noise=0.02, seed=1)
    before, after, _healed = segments(y, w, RULE)
    assert (before.end, after.end) == (400, 460)
    assert _crossing(y, w / w.mean(), before, after) == 412


# --- the crossing -----------------------------------------------------------------


def test_the_crossing_is_the_first_busy_bucket_at_or_under_the_half_way_level() -> None:
    before = Segment(0, 4, 0.8, 4.0)
    after = Segment(4, 10, 0.2, 6.0)
    y = np.array([0.8] * 4 + [0.7, 0.5, 0.1, 0.55, 0.2, 0.2])
    w = np.array([1.0] * 4 + [1.0, 1.0, 0.2, 1.0, 1.0, 1.0])
    # 0.5 is exactly half-way and counts; 0.1 at index 6 is too quiet (w < 0.25).
    assert _crossing(y, w, before, after) == 5
    w[5] = 0.1
    assert _crossing(y, w, before, after) == 8


def test_the_crossing_falls_back_to_the_segment_start() -> None:
    before, after = Segment(0, 3, 0.8, 3.0), Segment(3, 6, 0.2, 3.0)
    y = np.array([0.8, 0.8, 0.8, 0.6, 0.6, 0.6])
    assert _crossing(y, np.ones(6), before, after) == 3


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize(("min_size", "jump"), [(1, 1), (3, 1), (3, 2), (2, 5)])
def test_the_vectorized_search_finds_what_ruptures_own_binseg_finds(
    seed: int, min_size: int, jump: int
) -> None:
    """Same gains, same ties: identical change points on noisy series with steps,
    uneven weights and empty buckets."""
    import ruptures as rpt

    rng = np.random.default_rng(seed)
    n = int(rng.integers(7, 1500))
    w = rng.uniform(0.01, 2.0, n)
    w[rng.integers(0, n, n // 5)] = 0.0
    y = np.clip(0.7 + rng.normal(0, 0.05, n), 0, 1)
    y[n // 3 :] -= 0.3 * (seed % 2)
    signal = np.column_stack([y, w])
    for pen in (0.001, 0.05):
        plain = rpt.Binseg(custom_cost=WeightedMeanCost(), min_size=min_size, jump=jump)
        fast = VectorBinseg(custom_cost=WeightedMeanCost(), min_size=min_size, jump=jump)
        assert fast.fit(signal).predict(pen=pen) == plain.fit(signal).predict(pen=pen)


# ------------------------------------------------- busy buckets


def test_without_waits_busy_is_by_prompt_tokens() -> None:
    w = np.array([100.0, 100.0, 40.0, 60.0])
    assert list(busy(w)) == list(busy(w, np.zeros(4))) == [True, True, False, True]
    assert list(busy(np.array([]))) == []


def test_a_wait_that_holds_makes_a_bucket_busy() -> None:
    w = np.array([100.0, 100.0, 10.0, 100.0])
    wait = np.array([50.0, 50.0, 50.0, 50.0])
    assert list(busy(w, wait)) == [True, True, True, True]
