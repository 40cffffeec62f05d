"""What is normal for a series at that time: its seasonal shape (contract section 5c).

Traffic has seasons: busy weekdays, quiet evenings, nights and weekends. Many hit
rates follow them. A managed API with a 5-minute TTL expires more of its prefixes
when fewer requests come (0.60 by day, 0.18 in the evening, 0.05 on a Saturday
night); a self-hosted service's continuing sessions thin out at night. A dip that
comes back at the same hour every day, or every weekend, is the series' normal,
not a change.

The shape is estimated the way the anomaly monitors that users trust do it
(Datadog's seasonal monitors, LinkedIn ThirdEye's week-over-week baselines): each
5-minute slot of the day is compared with the same slot on the previous days of
the same kind (weekdays with weekdays, Saturdays and Sundays with weekend days),
never with later data, so a pass computes the same shape for a bucket whenever it
runs.

* **Relative to a moving level.** For each day, the level is the token-weighted
  median hit rate of the `LEVEL_DAYS` days before it; a reference day contributes
  its slot's hit rate *minus that level*. A release that lowers the hit rate for
  good lowers the level too, after a few days, but not the shape: the shape is the
  median of those differences, and the change stays in the deseasonalized series
  (`adjusted`) instead of being learned as the new normal. A slow erosion stays a
  decline there too (the level lags it by half the level window).
* **Robust.** The median over at most `REFERENCE_DAYS` same-kind days: one bad day
  (yesterday's regression) moves it little. Each slot is smoothed over +-15
  minutes first (a quiet night's 5-minute buckets hold a handful of requests).
* **Needs history.** A slot has a shape once `MIN_REFERENCES` (3) earlier days of
  its kind hold traffic in it: from the fourth weekday for weekdays, from the
  second Sunday for weekends. Before that the shape is unknown (offset 0) and
  the other explanations of a lull apply (`service.detection.lulls`).
* **A band.** `spread` is the day-to-day spread of the slot's relative level
  (1.4826 MAD over the reference days): how far a normal day strays at that hour.
  A drop must clear it to count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from service.timeunits import DAY_US

Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]
I64 = npt.NDArray[np.int64]

#: Days whose median hit rate is the level a reference day's slot is compared with.
LEVEL_DAYS = 7
#: Same-kind days before a day that give its shape (the most recent ones).
REFERENCE_DAYS = 7
#: Earlier same-kind days with traffic in a slot before its shape is trusted.
MIN_REFERENCES = 3
#: Each slot's hit rate is read over this many seconds either side of it.
SMOOTH_S = 900


@dataclass(frozen=True)
class Season:
    """Per bucket of a series: `offset`, the slot's usual hit rate minus the
    moving level (0 where unknown); `known`, whether the shape is known there;
    `spread`, the day-to-day spread of that relative level (0 where unknown)."""

    offset: Floats
    known: Bools
    spread: Floats

    @staticmethod
    def none(n: int) -> Season:
        """No shape anywhere: every bucket judged against its neighbours only."""
        return Season(np.zeros(n), np.zeros(n, dtype=np.bool_), np.zeros(n))

    def adjusted(self, hit_rate: Floats) -> Floats:
        """The hit rate with the seasonal shape taken out: flat under seasons alone."""
        return hit_rate - self.offset


def is_weekend(day: I64) -> Bools:
    """Days since the epoch (1970-01-01 was a Thursday) that fall on a Saturday or
    a Sunday (UTC)."""
    return np.asarray((day + 3) % 7 >= 5)


def season_of(
    bucket_us: I64,
    cached: Floats,
    prompt: Floats,
    bucket_s: int,
    exclude: Bools | None = None,
) -> Season:
    """The seasonal shape at each bucket of a series (buckets of `bucket_s`,
    `cached` and `prompt` tokens each; see the module docstring). `exclude`: buckets
    that are no reference (inside a drop already found: a regression of Tuesday is
    not Wednesday's normal)."""
    n = len(bucket_us)
    if n == 0:
        return Season.none(0)
    if exclude is not None:
        cached, prompt = np.where(exclude, 0.0, cached), np.where(exclude, 0.0, prompt)
    slots = max(1, -(-86_400 // bucket_s))
    first_day = int(bucket_us[0] // DAY_US)
    day = (bucket_us // DAY_US - first_day).astype(np.int64)
    slot = ((bucket_us % DAY_US) // (bucket_s * 1_000_000)).astype(np.int64)
    days = int(day[-1]) + 1
    grid_c, grid_p = _grids(day, slot, cached, prompt, days, slots)
    smooth_c, smooth_p = _smoothed(grid_c, grid_p, max(0, round(SMOOTH_S / bucket_s)))
    level = _levels(day, cached, prompt, days)
    with np.errstate(invalid="ignore", divide="ignore"):
        relative = np.where(smooth_p > 0, smooth_c / smooth_p, np.nan) - level[:, None]
    weekend = is_weekend(np.arange(days, dtype=np.int64) + first_day)
    shape, spread = _shapes(relative, weekend, MIN_REFERENCES)
    offset = shape[day, slot]
    known = ~np.isnan(offset)
    return Season(
        offset=np.where(known, offset, 0.0),
        known=known,
        spread=np.where(known, spread[day, slot], 0.0),
    )


def _grids(
    day: I64, slot: I64, cached: Floats, prompt: Floats, days: int, slots: int
) -> tuple[Floats, Floats]:
    """Cached and prompt tokens on a (day, slot) grid (empty slots 0)."""
    grid_c = np.zeros((days, slots))
    grid_p = np.zeros((days, slots))
    np.add.at(grid_c, (day, slot), cached)
    np.add.at(grid_p, (day, slot), prompt)
    return grid_c, grid_p


def _smoothed(grid_c: Floats, grid_p: Floats, half: int) -> tuple[Floats, Floats]:
    """Sums over +-`half` slots, along time (across midnight too)."""
    if half == 0:
        return grid_c, grid_p
    kernel = np.ones(2 * half + 1)
    flat_c = np.convolve(grid_c.ravel(), kernel, mode="same")
    flat_p = np.convolve(grid_p.ravel(), kernel, mode="same")
    return flat_c.reshape(grid_c.shape), flat_p.reshape(grid_p.shape)


def _levels(day: I64, cached: Floats, prompt: Floats, days: int) -> Floats:
    """Each day's moving level: the token-weighted median bucket hit rate over the
    `LEVEL_DAYS` days before it (NaN for the first day: nothing before it)."""
    y = np.where(prompt > 0, cached / np.maximum(prompt, 1e-12), 0.0)
    starts = np.searchsorted(day, np.arange(days + 1))
    level = np.full(days, np.nan)
    for d in range(1, days):
        lo, hi = starts[max(0, d - LEVEL_DAYS)], starts[d]
        if hi > lo:
            level[d] = weighted_median(y[lo:hi], prompt[lo:hi])
    return level


def weighted_median(values: Floats, weights: Floats) -> float:
    """The value at which half the weight lies below (NaN without weight)."""
    total = float(weights.sum())
    if total <= 0:
        return float("nan")
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    return float(values[order][np.searchsorted(cumulative, total / 2)])


def _shapes(relative: Floats, weekend: Bools, min_references: int) -> tuple[Floats, Floats]:
    """Per (day, slot): the median relative level of the `REFERENCE_DAYS` most recent
    earlier days of the same kind, and its spread; NaN where fewer than
    `min_references` of them hold traffic in the slot."""
    days, slots = relative.shape
    shape = np.full((days, slots), np.nan)
    spread = np.full((days, slots), np.nan)
    for d in range(days):
        same = np.flatnonzero(weekend[:d] == weekend[d])[-REFERENCE_DAYS:]
        if len(same) < min_references:
            continue
        refs = relative[same]
        count = np.sum(~np.isnan(refs), axis=0)
        enough = count >= min_references
        if not enough.any():
            continue
        median = _column_medians(refs[:, enough])
        mad = _column_medians(np.abs(refs[:, enough] - median))
        shape[d, enough] = median
        spread[d, enough] = 1.4826 * mad
    return shape, spread


def _column_medians(values: Floats) -> Floats:
    """The median of each column, NaNs left out (each column holds a value): what
    `np.nanmedian(values, axis=0)` gives, by one sort instead of its per-column path
    for small arrays."""
    ordered = np.sort(values, axis=0)  # NaNs sort last
    count = np.sum(~np.isnan(values), axis=0)
    lo = np.take_along_axis(ordered, ((count - 1) // 2)[None, :], axis=0)[0]
    hi = np.take_along_axis(ordered, (count // 2)[None, :], axis=0)[0]
    return np.asarray((lo + hi) / 2)
