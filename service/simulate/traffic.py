"""Arrival processes: sessions start as a non-homogeneous Poisson process whose
rate follows the daily curve and the timeline's traffic multipliers."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from datetime import datetime

import numpy as np
import numpy.typing as npt

from service.simulate.scenario import DAY_S, HOUR_S, DailyCurve, LengthDist, Tenants

FloatArray = npt.NDArray[np.float64]


def curve_factor(curve: DailyCurve, t: FloatArray, start: datetime) -> FloatArray:
    """Relative rate (peak 1.0) at times `t` (seconds since `start`)."""
    local = t + start.timestamp() + curve.utc_offset_hours * HOUR_S
    hour = np.mod(local, DAY_S) / HOUR_S
    span = max(curve.end_hour - curve.start_hour, 1e-9)
    phase = np.clip((hour - curve.start_hour) / span, 0.0, 1.0)
    bump = np.sin(np.pi * phase) ** curve.shape
    factor = curve.night + (1.0 - curve.night) * bump
    factor = np.maximum(factor, curve.night)
    if curve.weekend != 1.0:
        # 1970-01-01 was a Thursday: weekday 0 = Monday after shifting by 3 days.
        weekday = np.floor(local / DAY_S + 3) % 7
        factor = np.where(weekday >= 5, factor * curve.weekend, factor)
    return np.asarray(factor, dtype=np.float64)


def multiplier_at(steps: Sequence[tuple[float, float]], t: FloatArray) -> FloatArray:
    """The traffic multiplier in force at `t`, from sorted (time, factor) steps."""
    factors = np.ones_like(t)
    for at_s, factor in steps:
        factors[t >= at_s] = factor
    return factors


def poisson_arrivals(
    rng: np.random.Generator,
    duration_s: float,
    peak_rate: float,
    curve: DailyCurve,
    start: datetime,
    multipliers: Sequence[tuple[float, float]] = (),
    chunk_s: float = DAY_S,
) -> FloatArray:
    """Sorted arrival times in [0, duration_s) at rate peak_rate * curve * multiplier.

    Thinning: draw a homogeneous process at the maximal rate, keep each point
    with probability rate(t) / max rate. Done in day-long chunks so memory
    stays bounded whatever the duration.
    """
    max_mult = max([1.0, *(f for _, f in multipliers)])
    lam_max = peak_rate * max_mult * max(1.0, curve.weekend)
    if lam_max <= 0 or duration_s <= 0:
        return np.empty(0)
    parts: list[FloatArray] = []
    t0 = 0.0
    while t0 < duration_s:
        t1 = min(t0 + chunk_s, duration_s)
        n = int(rng.poisson(lam_max * (t1 - t0)))
        times = np.sort(rng.uniform(t0, t1, n))
        keep = rng.random(n) * lam_max < (
            peak_rate * curve_factor(curve, times, start) * multiplier_at(multipliers, times)
        )
        parts.append(times[keep])
        t0 = t1
    return np.concatenate(parts) if parts else np.empty(0)


class Normals:
    """Standard normal draws from a seeded numpy Generator, in blocks: the
    per-request loop needs millions, and random.gauss per call is slow."""

    __slots__ = ("_block", "_buffer", "_i", "_rng")

    def __init__(self, rng: np.random.Generator, block: int = 65_536) -> None:
        self._rng = rng
        self._block = block
        self._buffer: list[float] = []
        self._i = 0

    def __call__(self) -> float:
        if self._i >= len(self._buffer):
            self._buffer = self._rng.standard_normal(self._block).tolist()
            self._i = 0
        self._i += 1
        return self._buffer[self._i - 1]


class TenantDraws:
    """The tenant of each new session, drawn by the tenants' weights: inverse
    transform sampling on their cumulative weights, a block of draws at a time from
    a seeded numpy Generator (O(log N) each: 50,000 tenants cost nothing). A
    tenant's name is formatted the first time it is drawn."""

    __slots__ = ("_block", "_buffer", "_cdf", "_i", "_names", "_rng", "_spec")

    def __init__(self, spec: Tenants, rng: np.random.Generator, block: int = 4_096) -> None:
        if spec.shares:
            weights = np.asarray(spec.shares, dtype=np.float64)
        else:
            weights = np.arange(1, spec.size + 1, dtype=np.float64) ** -spec.zipf_s
        cdf = np.cumsum(weights)
        self._cdf = cdf / cdf[-1]
        self._spec = spec
        self._rng = rng
        self._block = block
        self._buffer: list[int] = []
        self._i = 0
        self._names: dict[int, str] = {}

    def __call__(self) -> str:
        if self._i >= len(self._buffer):
            u = self._rng.random(self._block)
            drawn = np.searchsorted(self._cdf, u, side="right")
            self._buffer = np.minimum(drawn, len(self._cdf) - 1).tolist()
            self._i = 0
        k = self._buffer[self._i]
        self._i += 1
        name = self._names.get(k)
        if name is None:
            name = self._names[k] = self._spec.name(k + 1)
        return name


def sample_length(normals: Normals, dist: LengthDist) -> int:
    value = int(math.exp(dist.mu + dist.sigma * normals()) + 0.5)
    return min(max(value, dist.low), dist.high)


def geometric(rnd: random.Random, mean: float, cap: int) -> int:
    """Turns in a session: geometric on 1, 2, ... with the given mean, capped."""
    if mean <= 1.0:
        return 1
    p = 1.0 / mean
    u = rnd.random()
    turns = 1 + int(math.log(1.0 - u) / math.log(1.0 - p))
    return min(max(turns, 1), cap)
