"""Lasting drops of a series, judged against what is normal for it at that time
(contract sections 5 and 5c).

A series is searched once its seasonal shape is taken out (`Season.adjusted`): a
quiet evening, night or weekend that recurs is flat there, a release that breaks
the prompt is a step, a 40-minute break rolled back is a dip (the search finds
dips, `changepoints.VectorBinseg`), a slow erosion is a decline. Each segment
boundary is then judged:

1. **How far below normal.** The expected level after the boundary is the level
   before it plus the seasonal shape of the after buckets (the seasonal judgement);
   where the load explains more (the after buckets' hit rate at their load before
   the change, `service.detection.lulls`), the smaller fall is taken. The fall must
   reach `min_abs` and `min_rel` of the expected level.
2. **Lasting.** At least `min_buckets` buckets of the after segment are below
   half-way, each of them one a judgement can be made on: busy (`busy`), or with
   a known seasonal shape, or at a load the history knows. A lull of the first
   night of data, which nothing can explain yet, is not confirmed by its quiet
   buckets; the next busy day's traffic confirms a real drop.
3. **Evidence by counts.** The fall must be `z_score` standard errors: each
   bucket's variance is binomial over its requests (a hit rate of 3 requests is
   worth little) or the series' own bucket noise at its tokens, whichever is larger,
   and the seasonal band (the spread of normal days at those hours) adds its own.
   A handful of requests cannot open a regression; a busy 40-minute break can.

What one session of a quiet hour can do is judged on the records
(`service.detection.evidence`), where sessions are visible.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from service.detection.changepoints import (
    Drop,
    DropRule,
    Opening,
    Segment,
    _crossing,
    busy,
    noise_sigma,
    segments,
)
from service.detection.diagnosis import LOAD_BOUND_CAUSES
from service.detection.evidence import OPENING_S
from service.detection.lulls import LoadReference, smoothed_load
from service.detection.seasonal import Season, season_of
from service.detection.series import I64, Series
from service.timeunits import DAY_US as _DAY_US

Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]
_EPSILON = 1e-9


@dataclass(frozen=True)
class Signal:
    """One series as detection judges it: per bucket its hit rate, prompt tokens,
    requests, callers' summed wait (None: unknown), start time and seasonal shape."""

    hit_rate: Floats
    tokens: Floats
    requests: Floats
    bucket_us: npt.NDArray[np.int64]
    season: Season
    wait: Floats | None = None
    bucket_s: int = 300
    #: Buckets inside drops already found: no reference for what is normal.
    excluded: Bools | None = None

    def __len__(self) -> int:
        return len(self.hit_rate)

    @property
    def adjusted(self) -> Floats:
        return self.season.adjusted(self.hit_rate)


def find_drops(series: Series, bucket_s: int, rule: DropRule) -> list[Drop]:
    """The lasting drops of a detection series, each judged against a normal that
    the others do not make: the drops found are taken out of the references (the
    seasonal shape's and the load's) and the series judged again, until that changes
    nothing (`ROUNDS` at most). A week with a change every day has a regression in
    most days' same hours: without this, Tuesday's broken afternoon is half of
    Thursday's normal, and Thursday's own break passes for one."""
    excluded = np.zeros(len(series), dtype=np.bool_)
    drops: list[Drop] = []
    for _ in range(ROUNDS):
        drops = lasting_drops(signal_of(series, bucket_s, excluded), rule)
        spans = _spans(drops, len(series))
        if np.array_equal(spans, excluded):
            break
        excluded = spans
    return drops


#: Rounds of `find_drops` at most (the second is the usual last).
ROUNDS = 3


def _spans(drops: list[Drop], n: int) -> Bools:
    """The buckets from each drop's change to its recovery (or the series' end)."""
    spans = np.zeros(n, dtype=np.bool_)
    for drop in drops:
        spans[drop.after.start : drop.recovered_at if drop.recovered_at is not None else n] = True
    return spans


def signal_of(series: Series, bucket_s: int, excluded: Bools | None = None) -> Signal:
    """A detection series as judged: with its seasonal shape (`season_of`) learned
    outside the `excluded` buckets."""
    return Signal(
        hit_rate=series.hit_rate,
        tokens=series.weight,
        requests=series.sums["requests"].astype(np.float64),
        bucket_us=series.bucket_us,
        season=season_of(
            series.bucket_us,
            series.sums["cached_tokens"].astype(np.float64),
            series.weight,
            bucket_s,
            excluded,
        ),
        wait=series.wait,
        bucket_s=bucket_s,
        excluded=excluded,
    )


def lasting_drops(signal: Signal, rule: DropRule) -> list[Drop]:
    """Every segment boundary of the adjusted series that the module's three
    judgements call a lasting drop, with its recovery.

    A boundary whose own step is too small but ends a staircase down (each segment
    lower than the one before: a slow erosion, searched as steps) is judged from the
    top of the staircase: its after side is the whole way down. And the series' last
    segment, still going on, is judged by its last `TAIL_S` too: an erosion that is
    still under way sits lower than the mean of its segment, and waiting for the
    search to split it would report it a day late."""
    if not len(signal):
        return []
    z = signal.adjusted
    parts = segments(z, signal.tokens, rule)
    judge = _Judge(signal, z, rule)
    drops = [d for i in range(1, len(parts)) if (d := _drop_at(parts, i, judge)) is not None]
    if not any(d.after.end == len(z) for d in drops):
        tail = _tail_drop(parts, judge, signal)
        if tail is not None:
            drops.append(tail)
    unique = {d.at: d for d in sorted(drops, key=lambda d: d.fall)}  # the deepest of each
    return sorted(unique.values(), key=lambda d: d.at)


#: The latest stretch of a series that `lasting_drops` judges on its own.
TAIL_S = 6 * 3600


def _drop_at(
    parts: list[Segment], i: int, judge: _Judge, deepest: Segment | None = None
) -> Drop | None:
    """The drop into segment `i` (judged on `deepest`, a part of it, when given): from
    the segment before when that step is a drop by itself (a change of its own, even
    a day after another one), else from the top of the staircase it ends, when there
    is one (a slow erosion, none of whose steps is a drop, dates from its onset)."""
    target = deepest or parts[i]
    top = _staircase_top(parts, i, judge, target)
    tops = [i - 1] if deepest is None else []
    if top < i - 1:
        tops.append(top)
    for b in tops:
        judged = judge.fall(parts[b], target)
        if judged is not None:
            break
    else:
        return None
    before = parts[b]
    after = parts[i] if b == i - 1 else _union(judge.z, judge.w_norm, parts[b + 1 : i + 1])
    fall, opening = judged
    rule = judge.rule
    back = before.level - max(rule.min_abs / 2, fall / 4)
    recovered = judge.recovery(parts[i + 1 :], back)
    at = _crossing(
        judge.z, judge.w_norm, before, Segment(after.start, after.end, target.level, after.weight)
    )
    return Drop(at, before, after, recovered, fall, opening)


def _tail_drop(parts: list[Segment], judge: _Judge, signal: Signal) -> Drop | None:
    """The drop into the last segment judged on its last `TAIL_S` alone."""
    if len(parts) < 2:
        return None
    last = parts[-1]
    since = signal.bucket_us[-1] - TAIL_S * 1_000_000
    start = max(last.start, int(np.searchsorted(signal.bucket_us, since)))
    if start == last.start or last.end - start < judge.rule.min_buckets:
        return None
    tail = _union(judge.z, judge.w_norm, [Segment(start, last.end, 0.0, 0.0)])
    return _drop_at(parts, len(parts) - 1, judge, tail)


def _staircase_top(parts: list[Segment], i: int, judge: _Judge, target: Segment) -> int:
    """The index of the highest segment of the run of ever lower segments ending at
    `i` (i - 1 when the step into `i` is not part of one), comparing segments by
    their busy buckets and passing over those with too few: a working set outgrowing
    its KV budget loses the busy hours first, and each quiet night in between is fine
    (so is each night's level), one step down a day. No step it passes over lasts
    longer than `MAX_STEP_US`: a weekend night a few points above the three weekdays
    after it is a plateau and its season, not the first step of an erosion."""
    current = judge.busy_level(target)
    current = target.level if current is None else current
    top, k = i - 1, i - 1
    while k >= 0:
        level = judge.busy_level(parts[k])
        if level is not None:
            if level <= current:
                break
            if k < i - 1 and judge.lasts(parts[top]) > MAX_STEP_US:
                break
            top, current = k, level
        k -= 1
    return top


#: A step of a staircase lasts at most this long (an erosion steps down daily).
MAX_STEP_US = 2 * _DAY_US


def _union(z: Floats, w: Floats, parts: list[Segment]) -> Segment:
    start, end = parts[0].start, parts[-1].end
    weight = float(w[start:end].sum())
    return Segment(start, end, float((z[start:end] * w[start:end]).sum() / weight), weight)


class _Judge:
    """The three judgements of the module docstring over one series."""

    z: Floats

    def __init__(self, signal: Signal, z: Floats, rule: DropRule) -> None:
        self.signal, self.z, self.rule = signal, z, rule
        w = signal.tokens
        self.w_norm = w / w.mean()
        self.is_busy = busy(w, signal.wait)
        self.sigma = max(noise_sigma(z, self.w_norm), rule.sigma_floor)
        self.load = smoothed_load(signal.requests, signal.bucket_us, signal.bucket_s)

    def fall(self, before: Segment, after: Segment) -> tuple[float, Opening] | None:
        """How far the after segment is below normal, over its buckets a judgement
        can be made on, and its opening hours; None when it is no lasting drop."""
        rule, s = self.rule, self.signal
        if before.level - after.level + _EPSILON < rule.min_abs:
            return None
        window = slice(after.start, after.end)
        load_expected, load_known = self._load(after.start, self.load[window])
        judged = self.is_busy[window] | s.season.known[window] | load_known
        if int(judged.sum()) < rule.min_buckets:
            return None
        seasonal = before.level + s.season.offset[window]
        expected = np.where(load_known, np.minimum(load_expected, seasonal), seasonal)[judged]
        y, w = s.hit_rate[window][judged], s.tokens[window][judged]
        fall = float((w * (expected - y)).sum() / w.sum()) + _EPSILON
        if fall < rule.min_abs or fall < rule.min_rel * float((w * expected).sum() / w.sum()):
            return None
        if int((y <= expected - fall / 2).sum()) < rule.min_buckets:
            return None
        indices = np.arange(after.start, after.end)[judged]
        if fall < rule.z_score * self._standard_error(before, indices, expected):
            return None
        return fall, self._opening(indices, expected)

    def _opening(self, indices: npt.NDArray[np.intp], expected: Floats) -> Opening:
        """The judged buckets of the first `OPENING_S` of the after side."""
        times = self.signal.bucket_us[indices]
        keep = times < times[0] + OPENING_S * 1_000_000
        w = self.signal.tokens[indices][keep]
        level = float((w * expected[keep]).sum() / w.sum())
        return Opening(int(indices[0]), int(indices[keep][-1]) + 1, level)

    def lasts(self, part: Segment) -> int:
        """How long a segment spans (microseconds, its last bucket included)."""
        b = self.signal.bucket_us
        return int(b[part.end - 1] - b[part.start]) + self.signal.bucket_s * 1_000_000

    def busy_level(self, part: Segment) -> float | None:
        """The segment's level over its busy buckets (None: fewer than `min_buckets`)."""
        window = slice(part.start, part.end)
        busy = self.is_busy[window]
        if int(busy.sum()) < self.rule.min_buckets:
            return None
        w = self.signal.tokens[window][busy]
        return float((w * self.z[window][busy]).sum() / w.sum())

    def recovery(self, later: list[Segment], level: float) -> int | None:
        """Where the series came back to `level` for good: the first of a run of
        segments at that level on their busy buckets holding `recovery_buckets` busy
        buckets with no busy dip below it in between (segments with too few busy
        buckets neither count nor break a run). None: not back yet.

        Busy buckets, because a quiet night at a good hit rate does not end a drop
        that the next busy morning still shows (a KV budget too small for the busy
        hours' working set is fine every night). Held, because a budget thrashing at
        the peak loses its working set for 40 minutes, holds it for 30, loses it
        again: a drop that recovers between two of its own dips has not recovered,
        and one regression stays open instead of one a dip."""
        start, held = None, 0
        for part in later:
            busy = self.busy_level(part)
            if busy is None:
                continue
            if busy < level:
                start, held = None, 0
                continue
            start = part.start if start is None else start
            held += int(self.is_busy[part.start : part.end].sum())
            if held >= self.rule.recovery_buckets:
                return start
        return None

    def _load(self, change: int, load: Floats) -> tuple[Floats, Bools]:
        s = self.signal
        keep = np.ones(change, dtype=np.bool_) if s.excluded is None else ~s.excluded[:change]
        reference = LoadReference.of(
            s.hit_rate[:change][keep], s.tokens[:change][keep], self.load[:change][keep]
        )
        return reference.expected(load)

    def _standard_error(
        self, before: Segment, after: npt.NDArray[np.intp], expected: Floats
    ) -> float:
        """Of the fall: both sides' means, each bucket binomial over its requests or
        the series' bucket noise at its tokens (the larger), plus the seasonal band
        of the after buckets (the spread of normal days, averaged over the days the
        after side spans)."""
        s = self.signal
        before_var = self._mean_variance(np.arange(before.start, before.end), before.level)
        w = s.tokens[after]
        observed = float((w * s.hit_rate[after]).sum() / w.sum())
        # The normal approximation at a level near 1 would call 2 misses in 8 requests
        # (expected: 5% misses) 3 standard errors; at the level seen it is 1.5.
        nearer_half = np.where(np.abs(expected - 0.5) < abs(observed - 0.5), expected, observed)
        after_var = self._mean_variance(after, nearer_half)
        w = s.tokens[after]
        band = float((w * s.season.spread[after]).sum() / w.sum())
        days = max(1.0, float(s.bucket_us[after[-1]] - s.bucket_us[after[0]]) / _DAY_US)
        return math.sqrt(before_var + after_var + band * band / days)

    def _mean_variance(self, index: npt.NDArray[np.intp], level: float | Floats) -> float:
        s = self.signal
        w = s.tokens[index]
        p = np.clip(level, 0.01, 0.99)
        binomial = p * (1 - p) / np.maximum(s.requests[index], 1.0)
        noise = self.sigma * self.sigma / np.maximum(self.w_norm[index], 1e-9)
        v = np.maximum(binomial, noise)
        return float((w * w * v).sum() / (w.sum() ** 2))


def separate_episodes(
    drops: Sequence[Drop], same_episode: Callable[[Drop, Drop, int], bool], bucket_us: I64
) -> list[Drop]:
    """The drops worth a regression each (contract section 5c: one change, one
    regression), each going on as long as its latest drop.

    A drop is the previous reported one going on when `same_episode(previous, drop,
    since_us)` says so, `since_us` the time from the previous one's recovery to the
    drop (0 while it is still down): the same cause, while it is still down or soon
    enough after its recovery that the recovery did not hold (`reopen_us`). A cut KV
    budget hurting more when the night's working set shifts, a slow erosion found
    again from a later step, a working set that fits every evening and thrashes again
    at the next day's peak: its after side and recovery become the later drop's, and
    a second alert would only repeat the first. One of another cause (a release breaking the
    prompt during an eviction episode) is a regression of its own."""
    reported: list[Drop] = []
    for drop in sorted(drops, key=lambda d: d.at):
        previous = reported[-1] if reported else None
        if previous is not None and same_episode(previous, drop, _since(previous, drop, bucket_us)):
            reported[-1] = replace(previous, after=drop.after, recovered_at=drop.recovered_at)
            continue
        reported.append(drop)
    return reported


def _since(previous: Drop, drop: Drop, bucket_us: I64) -> int:
    if previous.recovered_at is None or previous.recovered_at > drop.at:
        return 0
    return int(bucket_us[drop.at] - bucket_us[previous.recovered_at])


def reopen_us(cause: str) -> int:
    """How long after its recovery a drop of the same cause still reopens a
    regression: a week for a cause that comes and goes with the load
    (`LOAD_BOUND_CAUSES`: a working set that fits every evening and over a quiet
    weekend and thrashes again at the next peak, a TTL outlasted by the gaps between
    requests), whose recovery at a lower load is no recovery; none for the others (a
    prompt broken again after its fix is a new change, by a new release)."""
    return 7 * _DAY_US if cause in LOAD_BOUND_CAUSES else 0
