"""Lasting hit-rate drops in a token-weighted series.

Cost: token-weighted L2 (the weighted variance of the bucket hit rates around the
segment's mean). With weights = prompt tokens, a segment's mean is exactly its
token hit rate, and a bucket holding 1% of the usual traffic (a quiet night, the
edge of a gap) moves the cost 100 times less than a busy one: sparse buckets
cannot create a change. Empty buckets are left out of the series altogether.

Search: binary segmentation (ruptures `Binseg`) with that cost computed in O(1)
from cumulative sums; it needs O(n log n) cost evaluations where PELT needs
O(n^2) in the worst case, and a month of 5-minute buckets is 8,640 points.

Penalty: BIC-like, `beta * sigma^2 * log(n)`, with sigma the bucket-level noise of
the hit rate at average traffic, estimated robustly (MAD of weight-normalized
first differences, so level shifts barely inflate it) and floored at one point of
hit rate so that a perfectly flat series is not cut on rounding noise. The
lasting-drop rule (absolute, relative, duration) then decides what is reported.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np
import numpy.typing as npt
import ruptures as rpt
from ruptures.base import BaseCost

Floats = npt.NDArray[np.float64]
# Thresholds are inclusive; this keeps 0.7 - 0.6 (= 0.0999...) from missing "10 points".
_EPSILON = 1e-9


class WeightedMeanCost(BaseCost):  # type: ignore[misc]
    """Sum over the segment of w_i * (y_i - weighted mean)^2; signal columns (y, w)."""

    model = "weighted_l2"
    min_size = 1

    def fit(self, signal: Floats) -> WeightedMeanCost:
        self.signal = signal
        y, w = signal[:, 0], signal[:, 1]
        zero = np.zeros(1)
        self._w = np.concatenate([zero, np.cumsum(w)])
        self._wy = np.concatenate([zero, np.cumsum(w * y)])
        self._wyy = np.concatenate([zero, np.cumsum(w * y * y)])
        return self

    def error(self, start: int, end: int) -> float:
        weight = self._w[end] - self._w[start]
        if weight <= 0:
            return 0.0
        wy = self._wy[end] - self._wy[start]
        return float(self._wyy[end] - self._wyy[start] - wy * wy / weight)

    def errors(
        self, start: int | npt.NDArray[np.int64], end: int | npt.NDArray[np.int64]
    ) -> Floats:
        """`error` of many segments at once (either bound an array), by the same
        arithmetic."""
        weight = self._w[end] - self._w[start]
        wy = self._wy[end] - self._wy[start]
        with np.errstate(divide="ignore", invalid="ignore"):
            out = self._wyy[end] - self._wyy[start] - wy * wy / weight
        return np.where(weight > 0, out, 0.0)


class VectorBinseg(rpt.Binseg):  # type: ignore[misc]
    """ruptures' binary segmentation with its split search vectorized: the gain of
    every candidate split of [start, end) comes from the cost's cumulative sums in
    one NumPy expression instead of two Python calls per candidate. Same gains, same
    choice (the largest gain, ties to the later split, as `max` over (gain, bkp)
    pairs picks), so the same change points, in a fraction of the time: what lets
    detection watch a service's groups as well as the service."""

    @cache  # noqa: B019 - ruptures clears it on every fit
    def single_bkp(self, start: int, end: int) -> tuple[int | None, float]:
        cost: WeightedMeanCost = self.cost
        bkps = np.arange(start, end, self.jump)
        bkps = bkps[(bkps - start >= self.min_size) & (end - bkps >= self.min_size)]
        if not len(bkps):
            return None, 0
        gains = cost.error(start, end) - cost.errors(start, bkps) - cost.errors(bkps, end)
        best = len(gains) - 1 - int(np.argmax(gains[::-1]))
        return int(bkps[best]), float(gains[best])


@dataclass(frozen=True)
class DropRule:
    """What counts as a regression: a drop of at least `min_abs` (absolute) and
    `min_rel` (relative to the level before), lasting `min_buckets` buckets."""

    min_abs: float = 0.10
    min_rel: float = 0.20
    min_buckets: int = 3
    beta: float = 3.0
    sigma_floor: float = 0.01


@dataclass(frozen=True)
class Segment:
    start: int  # index into the series (inclusive)
    end: int  # exclusive
    level: float  # token-weighted hit rate
    weight: float  # tokens


@dataclass(frozen=True)
class Drop:
    """A lasting drop at series index `at`; `recovered_at`: the first index of a later
    segment back near the level before (None: still low)."""

    at: int
    before: Segment
    after: Segment
    recovered_at: int | None


def noise_sigma(y: Floats, w: Floats) -> float:
    """Bucket-level noise of y at mean weight: var(y_i) ~ sigma^2 / w_i."""
    if len(y) < 3:
        return 0.0
    d = np.diff(y) / np.sqrt(1.0 / w[1:] + 1.0 / w[:-1])
    return float(1.4826 * np.median(np.abs(d)))


def segments(y: Floats, w: Floats, rule: DropRule) -> list[Segment]:
    """Change points of the weighted series, as segments with their levels."""
    n = len(y)
    if n == 0:
        return []
    w = w / w.mean()
    bkps = [n]
    if n >= 2 * rule.min_buckets:
        sigma = max(noise_sigma(y, w), rule.sigma_floor)
        penalty = rule.beta * sigma * sigma * math.log(n)
        algo = VectorBinseg(custom_cost=WeightedMeanCost(), min_size=rule.min_buckets, jump=1)
        bkps = algo.fit(np.column_stack([y, w])).predict(pen=penalty)
    bounds = [0, *bkps]
    parts = [_segment(y, w, a, b) for a, b in itertools.pairwise(bounds)]
    return _absorb_transitions(_merge_close(parts, y, w, rule), y, w, rule)


def _segment(y: Floats, w: Floats, start: int, end: int) -> Segment:
    weight = float(w[start:end].sum())
    level = float((y[start:end] * w[start:end]).sum() / weight) if weight > 0 else 0.0
    return Segment(start, end, level, weight)


def _merge_close(parts: list[Segment], y: Floats, w: Floats, rule: DropRule) -> list[Segment]:
    """Join neighbours whose levels differ by less than half the reportable drop, so a
    real drop is not split into sub-threshold steps."""
    parts = list(parts)
    while len(parts) > 1:
        gaps = [abs(a.level - b.level) for a, b in itertools.pairwise(parts)]
        i = int(np.argmin(gaps))
        if gaps[i] + _EPSILON >= rule.min_abs / 2:
            break
        parts[i : i + 2] = [_segment(y, w, parts[i].start, parts[i + 1].end)]
    return parts


def _absorb_transitions(
    parts: list[Segment], y: Floats, w: Floats, rule: DropRule
) -> list[Segment]:
    """A short segment whose level lies between its neighbours' is the ramp of one
    change (a cache draining over a few buckets), not a change of its own: it joins
    the segment after it, so the change starts where the ramp starts."""
    i = 1
    while i < len(parts) - 1:
        before, ramp, after = parts[i - 1], parts[i], parts[i + 1]
        short = ramp.end - ramp.start <= 2 * rule.min_buckets
        between = min(before.level, after.level) <= ramp.level <= max(before.level, after.level)
        if short and between:
            parts[i : i + 2] = [_segment(y, w, ramp.start, after.end)]
        else:
            i += 1
    return parts


def _crossing(y: Floats, w: Floats, before: Segment, after: Segment) -> int:
    """Where in the after segment (which may open with a ramp) the level first falls
    half-way: the best estimate of the moment of the change."""
    midpoint = (before.level + after.level) / 2
    for i in range(after.start, after.end):
        if w[i] >= 0.25 and y[i] <= midpoint:
            return i
    return after.start


#: A bucket is busy when its prompt tokens reach this share of a typical busy
#: bucket's (the 75th percentile), or its callers' summed wait reaches `BUSY_WAIT`
#: of a typical busy bucket's.
BUSY_TOKENS = 0.5
BUSY_WAIT = 0.75


def busy(w: Floats, wait: Floats | None = None) -> npt.NDArray[np.bool_]:
    """Which buckets carry busy-hour traffic.

    By prompt tokens: at least half a typical busy bucket. Counting busy buckets, not
    a segment's length, keeps a quiet night with a low hit rate (many buckets, little
    traffic) and a 2-bucket dip that Binseg padded to its minimum size from passing
    as a lasting drop; a real drop that starts at night is reported once the day's
    traffic confirms it.

    By the callers' summed wait for the first token (`wait`, ms; Little's law: the
    requests waiting at once): callers that wait for each answer (chat users, agent
    loops) send fewer requests when every request misses and takes longer, while
    their waiting time holds. On llama-server (docs/lab.md), a timestamp at the top
    of the system prompt cut the requests per minute from ~30 to ~5 and kept the
    summed wait at ~110 s a minute: by tokens alone the broken release looked like a
    quiet night and was never reported. A quiet night's wait falls with its traffic
    (fewer callers), so the bar is higher (three quarters of a busy bucket's): 10%
    of the traffic with every request 5 times slower is still not busy.
    """
    if not len(w):
        return np.zeros(0, dtype=np.bool_)
    by_tokens = w >= BUSY_TOKENS * float(np.quantile(w, 0.75))
    if wait is None or not np.any(wait > 0):
        return by_tokens
    return by_tokens | (wait >= BUSY_WAIT * float(np.quantile(wait, 0.75)))


def _busy_buckets_down(
    y: Floats, is_busy: npt.NDArray[np.bool_], before: Segment, after: Segment
) -> int:
    """How many buckets of the after segment are busy and sit below the half-way
    level."""
    midpoint = (before.level + after.level) / 2
    window = slice(after.start, after.end)
    return int((is_busy[window] & (y[window] <= midpoint)).sum())


def lasting_drops(y: Floats, w: Floats, rule: DropRule, wait: Floats | None = None) -> list[Drop]:
    """Every segment boundary where the level falls by the rule's amounts and stays
    down for at least `min_buckets` busy buckets (`busy`; `wait` is each bucket's
    callers' summed wait for the first token, when known)."""
    parts = segments(y, w, rule)
    w_norm = w / w.mean() if len(w) else w
    is_busy = busy(w, wait)  # once per series: its quantiles are the whole series'
    drops = []
    for i in range(1, len(parts)):
        before, after = parts[i - 1], parts[i]
        fall = before.level - after.level + _EPSILON
        if fall < rule.min_abs or fall < rule.min_rel * before.level:
            continue
        if _busy_buckets_down(y, is_busy, before, after) < rule.min_buckets:
            continue
        recovered = next(
            (
                p.start
                for p in parts[i + 1 :]
                if p.level >= before.level - max(rule.min_abs / 2, fall / 4)
            ),
            None,
        )
        drops.append(Drop(_crossing(y, w_norm, before, after), before, after, recovered))
    return drops


def separate_episodes(drops: Sequence[Drop], explained: Callable[[Drop], bool]) -> list[Drop]:
    """The drops worth a regression each. A drop that starts while the series is still
    down from the previous reported one is a new regression only when `explained`
    (a change event stands beside it); otherwise it is the same episode getting worse,
    e.g. a cut KV budget hurting more when the night's working set shifts, and a
    second alert would only repeat the first."""
    reported: list[Drop] = []
    for drop in drops:
        previous = reported[-1] if reported else None
        still_down = previous is not None and (
            previous.recovered_at is None or previous.recovered_at > drop.at
        )
        if still_down and not explained(drop):
            continue
        reported.append(drop)
    return reported
