"""Unit tests of service.detection.changepoints on hand-built NumPy series.

They prove that the token-weighted L2 cost is the weighted variance it claims to be,
that the noise estimate ignores level shifts, and that `lasting_drops` reports a
clean step with its index and levels, applies the drop rule (absolute, relative,
duration, weight), ignores quiet and flat noisy stretches and traffic changes,
dates a ramp at its half-way crossing and finds the recovery. A 2-bucket dip, a
4-bucket ramp and long quiet nights were bugs once: they have tests of their own.
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
    WeightedMeanCost,
    _absorb_transitions,
    _crossing,
    _merge_close,
    busy,
    lasting_drops,
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


def day_and_night(
    days: int, day_buckets: int, night_buckets: int, night_lo: float, night_hi: float, seed: int
) -> tuple[Floats, Floats]:
    """Busy days at 70% (+-1 point) and nights at 1% of the traffic whose hit rate is
    uniform in [night_lo, night_hi] (a few requests per bucket: noisy)."""
    rng = np.random.default_rng(seed)
    ys: list[Floats] = []
    ws: list[Floats] = []
    for _ in range(days):
        ys.append(0.7 + rng.normal(0.0, 0.01, day_buckets))
        ws.append(np.full(day_buckets, BUSY))
        ys.append(rng.uniform(night_lo, night_hi, night_buckets))
        ws.append(np.full(night_buckets, BUSY / 100))
    return np.concatenate(ys), np.concatenate(ws)


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
    y = np.array([0.9, 0.9, 0.9, 0.1, 0.1])
    w = np.array([1.0, 1.0, 2.0, 4.0, 2.0])
    (only,) = segments(y, w, RULE)
    assert (only.start, only.end) == (0, 5)
    assert only.level == pytest.approx((0.9 * 4 + 0.1 * 6) / 10)
    assert lasting_drops(y, w, RULE) == []
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


# --- lasting drops --------------------------------------------------------------


def test_a_clean_step_drop_is_found_at_its_index_with_both_levels() -> None:
    y, w = steps([(0.7, 60), (0.3, 60)])
    (drop,) = lasting_drops(y, w, RULE)
    assert abs(drop.at - 60) <= 1
    assert (drop.before.start, drop.before.end) == (0, 60)
    assert (drop.after.start, drop.after.end) == (60, 120)
    assert drop.before.level == pytest.approx(0.7, abs=0.005)
    assert drop.after.level == pytest.approx(0.3, abs=0.005)
    assert drop.recovered_at is None


def test_the_drop_index_is_exact_on_a_noise_free_step() -> None:
    y, w = steps([(0.8, 30), (0.2, 30)], noise=0.0)
    (drop,) = lasting_drops(y, w, RULE)
    assert drop.at == 30
    assert drop.before.level == pytest.approx(0.8)
    assert drop.after.level == pytest.approx(0.2)


@pytest.mark.parametrize(
    ("before", "after"),
    [
        pytest.param(0.70, 0.61, id="9 points absolute (13% relative)"),
        pytest.param(0.90, 0.765, id="15% relative (13.5 points absolute)"),
        pytest.param(0.30, 0.22, id="27% relative but 8 points absolute"),
    ],
)
def test_a_drop_below_the_rule_is_not_reported(before: float, after: float) -> None:
    y, w = steps([(before, 40), (after, 40)], noise=0.003, seed=1)
    # The change itself is seen; only the rule rejects it.
    assert levels(segments(y, w, RULE)) == [(0, 40), (40, 80)]
    assert lasting_drops(y, w, RULE) == []


def test_a_drop_just_over_both_thresholds_is_reported() -> None:
    y, w = steps([(0.5, 40), (0.39, 40)], noise=0.003, seed=1)  # 11 points, 22%
    (drop,) = lasting_drops(y, w, RULE)
    assert drop.at == 40
    assert drop.before.level - drop.after.level == pytest.approx(0.11, abs=0.003)


def test_the_rule_is_a_parameter() -> None:
    y, w = steps([(0.70, 40), (0.61, 40)], noise=0.003, seed=1)
    (drop,) = lasting_drops(y, w, DropRule(min_abs=0.05, min_rel=0.10))
    assert drop.at == 40


def test_a_rise_is_not_a_drop() -> None:
    y, w = steps([(0.3, 40), (0.7, 40)])
    assert levels(segments(y, w, RULE)) == [(0, 40), (40, 80)]
    assert lasting_drops(y, w, RULE) == []


def test_a_drop_lasting_three_buckets_is_reported_with_its_recovery() -> None:
    y, w = steps([(0.7, 50), (0.2, 3), (0.7, 47)])
    (drop,) = lasting_drops(y, w, RULE)
    assert (drop.at, drop.after.start, drop.after.end, drop.recovered_at) == (50, 50, 53, 53)


@pytest.mark.parametrize("start", [50, 98], ids=["mid-series", "at the end"])
def test_a_drop_lasting_two_buckets_is_not_reported(start: int) -> None:
    y, w = steps([(0.7, start), (0.2, 2), (0.7, 98 - start)])
    assert lasting_drops(y, w, RULE) == []


def test_recovery_is_the_first_index_back_near_the_level_before() -> None:
    y, w = steps([(0.7, 40), (0.3, 30), (0.69, 30)], seed=2)
    (drop,) = lasting_drops(y, w, RULE)
    assert (drop.at, drop.recovered_at) == (40, 70)


def test_a_partial_recovery_is_no_recovery() -> None:
    # Back within max(5 points, fall / 4 = 10 points) of 70% counts; 55% does not.
    y, w = steps([(0.7, 40), (0.3, 30), (0.55, 30)], seed=2)
    (drop,) = lasting_drops(y, w, RULE)
    assert (drop.at, drop.recovered_at) == (40, None)


def test_a_drop_still_low_at_the_end_has_no_recovery() -> None:
    y, w = steps([(0.7, 40), (0.3, 40)], seed=5)
    assert [d.recovered_at for d in lasting_drops(y, w, RULE)] == [None]


def test_a_flat_noisy_series_gives_nothing_across_seeds() -> None:
    for seed in range(25):
        rng = np.random.default_rng(seed)
        w = rng.uniform(500.0, 1500.0, 288)  # a day of 5-minute buckets
        y = 0.6 + rng.normal(0.0, 0.6, 288) / np.sqrt(w)  # about 2 points of noise
        assert lasting_drops(y, w, RULE) == [], seed
        assert levels(segments(y, w, RULE)) == [(0, 288)], seed


def test_a_traffic_doubling_with_an_unchanged_hit_rate_finds_nothing() -> None:
    rng = np.random.default_rng(4)
    w = np.r_[np.full(60, BUSY), np.full(60, 2 * BUSY)]
    y = 0.6 + rng.normal(0.0, 0.3, 120) / np.sqrt(w)  # less noise with more traffic
    assert lasting_drops(y, w, RULE) == []
    assert levels(segments(y, w, RULE)) == [(0, 120)]


@pytest.mark.parametrize(
    ("night_buckets", "night_lo", "night_hi"),
    [
        pytest.param(96, 0.0, 0.3, id="8h nights, low hit rate"),
        pytest.param(144, 0.3, 1.0, id="12h nights, noisy hit rate"),
    ],
)
def test_quiet_nights_never_produce_a_drop(
    night_buckets: int, night_lo: float, night_hi: float
) -> None:
    for seed in range(3):
        y, w = day_and_night(3, 288 - night_buckets, night_buckets, night_lo, night_hi, seed)
        assert lasting_drops(y, w, RULE) == [], seed


def test_long_quiet_nights_with_a_low_hit_rate_never_produce_a_drop() -> None:
    y, w = day_and_night(3, 144, 144, 0.0, 0.3, seed=0)
    assert lasting_drops(y, w, RULE) == []


def test_a_low_stretch_of_quiet_buckets_at_the_end_is_no_drop() -> None:
    # Ten buckets of 1% traffic at 10%: many buckets, little traffic.
    y = np.r_[0.7 + np.random.default_rng(0).normal(0.0, 0.01, 100), np.full(10, 0.1)]
    w = np.r_[np.full(100, BUSY), np.full(10, BUSY / 100)]
    assert lasting_drops(y, w, RULE) == []


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_three_bucket_ramp_is_one_change_dated_at_its_crossing(seed: int) -> None:
    # 70% for 40 buckets, then 60, 42, 30 (buckets 40-42), then 20%.
    y, w = steps([(0.7, 40), (0.6, 1), (0.42, 1), (0.3, 1), (0.2, 40)], noise=0.002, seed=seed)
    (drop,) = lasting_drops(y, w, RULE)
    assert abs(drop.after.start - 40) <= 1
    # Half-way between ~70% and ~21% (the after level includes the ramp) is ~45%:
    # the 42% bucket is the first at or under it.
    assert (drop.before.level + drop.after.level) / 2 == pytest.approx(0.455, abs=0.01)
    assert drop.at == 41
    assert drop.after.end == 83 and drop.recovered_at is None


def test_a_four_bucket_ramp_is_one_change_starting_where_the_ramp_starts() -> None:
    y, w = steps([(0.7, 40), (0.6, 1), (0.5, 1), (0.4, 1), (0.3, 1), (0.2, 40)], seed=0)
    drops = lasting_drops(y, w, RULE)
    assert len(drops) == 1
    assert abs(drops[0].after.start - 40) <= 1
    assert drops[0].at == 42  # the first bucket at or under the half-way level


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

    from service.detection.changepoints import VectorBinseg, WeightedMeanCost

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


# ------------------------------------------------- busy buckets: the callers' wait


def _closed_loop(night: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Buckets of (hit rate, prompt tokens, summed wait in ms). The lab's v2 release on
    llama-server (docs/lab.md): every request misses and takes ~7 times longer, so
    callers that wait for answers send ~6 times fewer requests; their summed wait holds
    (~110 s a minute). A quiet night instead: a tenth of the callers, each request
    5 times slower, so half the summed wait."""
    high_y, high_w, high_wait = [0.9] * 5, [45_000.0] * 5, [110_000.0] * 5
    if night:
        low_y, low_w, low_wait = [0.02] * 4, [4_500.0] * 4, [55_000.0] * 4
    else:
        low_y, low_w, low_wait = [0.02] * 4, [7_000.0] * 4, [112_000.0] * 4
    return (
        np.array(high_y + low_y + high_y),
        np.array(high_w + low_w + high_w),
        np.array(high_wait + low_wait + high_wait),
    )


def test_callers_that_wait_for_answers_confirm_a_drop_their_slowdown_made_quiet() -> None:
    y, w, wait = _closed_loop(night=False)
    assert lasting_drops(y, w, RULE) == []  # by prompt tokens alone: a quiet stretch
    (drop,) = lasting_drops(y, w, RULE, wait)
    assert drop.at == 5 and drop.recovered_at == 9
    assert list(busy(w, wait)) == [True] * 14


def test_a_quiet_nights_wait_falls_with_its_callers_and_confirms_nothing() -> None:
    y, w, wait = _closed_loop(night=True)
    assert lasting_drops(y, w, RULE, wait) == []
    assert not busy(w, wait)[5:9].any()


def test_without_waits_busy_is_by_prompt_tokens() -> None:
    w = np.array([100.0, 100.0, 40.0, 60.0])
    assert list(busy(w)) == list(busy(w, np.zeros(4))) == [True, True, False, True]
    assert lasting_drops(np.array([]), np.array([]), RULE, np.array([])) == []
