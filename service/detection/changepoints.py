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
    detection watch a service's groups as well as the service.

    With `dips`, a segment's best split may also be the start of a *dip*: an
    interval [a, b) inside it whose level differs from both sides (a release rolled
    back 40 minutes later). Plain binary segmentation misses a short dip in a long
    segment: a single split at either of its edges gains about m^2 delta^2 / n, far
    below the penalty, however deep the dip. The dip's own gain (both splits at
    once) is computed for dip lengths on a geometric grid from `min_size` up, each
    length for every start in one NumPy expression, and wins when it beats the best
    single split by one more penalty (it is a second change point); the split at its
    end follows on the next round, where it is a plain step."""

    dip_penalty: float | None = None

    @cache  # noqa: B019 - ruptures clears it on every fit
    def single_bkp(self, start: int, end: int) -> tuple[int | None, float]:
        cost: WeightedMeanCost = self.cost
        bkps = np.arange(start, end, self.jump)
        bkps = bkps[(bkps - start >= self.min_size) & (end - bkps >= self.min_size)]
        if not len(bkps):
            return None, 0
        total = cost.error(start, end)
        gains = total - cost.errors(start, bkps) - cost.errors(bkps, end)
        best = len(gains) - 1 - int(np.argmax(gains[::-1]))
        bkp, gain = int(bkps[best]), float(gains[best])
        if self.dip_penalty is not None:
            dip = _best_dip(cost, start, end, self.min_size, total)
            if dip is not None and dip[1] - self.dip_penalty > gain:
                return dip[0], dip[1] - self.dip_penalty
        return bkp, gain


def _dip_lengths(shortest: int, longest: int) -> npt.NDArray[np.int64]:
    """Dip lengths to try: every length up to twice the shortest, then 1.25 times
    apart (a dip found at a nearby length is refined by the splits that follow)."""
    if longest < shortest:
        return np.zeros(0, dtype=np.int64)
    grid = [*range(shortest, min(2 * shortest, longest) + 1)]
    length = float(grid[-1])
    while True:
        length *= 1.25
        if round(length) > longest:
            break
        grid.append(round(length))
    return np.unique(np.array(grid, dtype=np.int64))


def _best_dip(
    cost: WeightedMeanCost, start: int, end: int, min_size: int, total: float
) -> tuple[int, float] | None:
    """The start and gain of the best dip [a, a + m) of [start, end), with at least
    `min_size` buckets on each side and in it: the grid's lengths a block at a time,
    each block for every start in one NumPy expression (the shortest length, then the
    earliest start, wins ties)."""
    best: tuple[int, float] | None = None
    lengths = _dip_lengths(min_size, end - start - 2 * min_size)
    for k in range(0, len(lengths), _DIP_BLOCK):
        m = lengths[k : k + _DIP_BLOCK, None]
        a = np.arange(start + min_size, end - min_size - int(m[0, 0]) + 1)[None, :]
        b = np.minimum(a + m, end - min_size)
        gains = total - cost.errors(start, a) - cost.errors(a, b) - cost.errors(b, end)
        gains = np.where(a + m <= end - min_size, gains, -np.inf)
        row, col = np.unravel_index(int(np.argmax(gains)), gains.shape)
        if best is None or gains[row, col] > best[1]:
            best = (int(a[0, col]), float(gains[row, col]))
    return best


#: Dip lengths searched at once by `_best_dip`.
_DIP_BLOCK = 6


@dataclass(frozen=True)
class DropRule:
    """What counts as a regression (contract section 5 and 5c): a drop of at least
    `min_abs` (absolute) and `min_rel` (relative to the level expected), lasting
    `min_buckets` buckets (`CACHEWATCH_DETECT_MIN_DURATION_S` over the bucket), and
    `z_score` standard errors beyond what the buckets' counts let chance make. It is
    over once the level is back for `recovery_buckets` busy buckets
    (`CACHEWATCH_DETECT_RECOVERY_S`)."""

    min_abs: float = 0.10
    min_rel: float = 0.20
    min_buckets: int = 6
    beta: float = 3.0
    sigma_floor: float = 0.01
    z_score: float = 3.0
    recovery_buckets: int = 36


@dataclass(frozen=True)
class Segment:
    start: int  # index into the series (inclusive)
    end: int  # exclusive
    level: float  # token-weighted mean of the series searched (hit rate, or adjusted)
    weight: float  # tokens


@dataclass(frozen=True)
class Opening:
    """The first hours of a drop's after side that a judgement could be made on:
    series indexes [start, end) and the hit rate expected there."""

    start: int
    end: int
    expected: float


@dataclass(frozen=True)
class Drop:
    """A lasting drop at series index `at`; `recovered_at`: the first index of a later
    segment back near the level before (None: still low). `fall`: how far below the
    expected level the after side is (the smaller of the seasonal and the lull
    judgement, `service.detection.drops`); segment levels are of the adjusted
    series."""

    at: int
    before: Segment
    after: Segment
    recovered_at: int | None
    fall: float = 0.0
    opening: Opening | None = None


def noise_sigma(y: Floats, w: Floats) -> float:
    """Bucket-level noise of y at mean weight: var(y_i) ~ sigma^2 / w_i, from the
    weight-normalized first differences (a level shift is one of thousands). The
    larger of two robust estimates: 1.4826 times their median absolute value, and
    their root mean square over the smallest 95% (divided by the 0.79 that trimming a
    normal's top 5% of squares keeps). The median alone reads 0 on the discrete hit
    rates of sparse traffic (a bucket of one request hits all or nothing, and half
    the differences are exactly 0), which let every pair of noisy buckets be a change."""
    if len(y) < 3:
        return 0.0
    d = np.diff(y) / np.sqrt(1.0 / w[1:] + 1.0 / w[:-1])
    squares = d * d
    kept = squares[squares <= np.quantile(squares, 0.95)]
    trimmed = math.sqrt(float(kept.mean()) / 0.79) if len(kept) else 0.0
    return max(float(1.4826 * np.median(np.abs(d))), trimmed)


def segments(y: Floats, w: Floats, rule: DropRule) -> list[Segment]:
    """Change points of the weighted series, short dips included, as segments with
    their levels."""
    n = len(y)
    if n == 0:
        return []
    w = w / w.mean()
    if n < 2 * rule.min_buckets:
        return [_segment(y, w, 0, n)]
    sigma = max(noise_sigma(y, w), rule.sigma_floor)
    penalty = rule.beta * sigma * sigma * math.log(n)
    algo = VectorBinseg(custom_cost=WeightedMeanCost(), min_size=rule.min_buckets, jump=1)
    algo.dip_penalty = penalty
    bkps = algo.fit(np.column_stack([y, w])).predict(pen=penalty)
    parts = _absorb_short(_parts(y, w, _refined(bkps, algo.cost)), y, w, rule.min_buckets)
    return _absorb_transitions(_merge_close(parts, y, w, rule), y, w, rule)


def _parts(y: Floats, w: Floats, bkps: list[int]) -> list[Segment]:
    return [_segment(y, w, a, b) for a, b in itertools.pairwise([0, *bkps])]


def _refined(bkps: list[int], cost: WeightedMeanCost) -> list[int]:
    """Each change point moved to the best split between its neighbours (twice over),
    however short that leaves a segment: binary segmentation fixes a point before it
    sees its neighbours (and a dip's start is found at a grid length), so a change can
    sit a bucket or two off, and its minimum segment size keeps later splits from
    mending it. Segments left short and alike are merged next (`_merge_close`)."""
    points = [0, *bkps]
    for _ in range(2):
        for k in range(1, len(points) - 1):
            lo, hi = points[k - 1], points[k + 1]
            candidates = np.arange(lo + 1, hi)
            if not len(candidates):
                continue
            gains = -cost.errors(lo, candidates) - cost.errors(candidates, hi)
            points[k] = int(candidates[int(np.argmax(gains))])
    return points[1:]


def _segment(y: Floats, w: Floats, start: int, end: int) -> Segment:
    weight = float(w[start:end].sum())
    level = float((y[start:end] * w[start:end]).sum() / weight) if weight > 0 else 0.0
    return Segment(start, end, level, weight)


def _absorb_short(parts: list[Segment], y: Floats, w: Floats, min_size: int) -> list[Segment]:
    """Segments shorter than `min_size` that refining left (shortest first) joined to
    the neighbour whose level is nearer: a change of its own lasts the minimum."""
    parts = list(parts)
    while len(parts) > 1:
        short = [i for i, p in enumerate(parts) if p.end - p.start < min_size]
        if not short:
            break
        i = min(short, key=lambda k: (parts[k].end - parts[k].start, k))
        left = abs(parts[i].level - parts[i - 1].level) if i > 0 else math.inf
        right = abs(parts[i].level - parts[i + 1].level) if i + 1 < len(parts) else math.inf
        j = i - 1 if left <= right else i + 1
        a, b = min(i, j), max(i, j)
        parts[a : b + 1] = [_segment(y, w, parts[a].start, parts[b].end)]
    return parts


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
