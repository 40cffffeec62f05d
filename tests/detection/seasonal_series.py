"""Hand-built detection series with seasons (pure NumPy, no database): two weeks of
5-minute buckets whose traffic follows a daily curve (busy days, quiet evenings and
nights, weekends at `weekend` of a weekday) and whose hit rate dips when the traffic
does (`lull`: what a managed API's TTL does to quiet hours), with each bucket's noise
that of its request count. `Changes` are laid over it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from service.detection.drops import Signal
from service.detection.seasonal import Season, season_of
from service.detection.series import Series

DAY_US = 86_400 * 1_000_000
HOUR_US = 3_600 * 1_000_000
BUCKET_S = 300
#: 2025-03-03, a Monday, 00:00 UTC, in days since the epoch.
MONDAY = 20_150
TOKENS_PER_REQUEST = 3_000.0

Change = Callable[[np.ndarray, np.ndarray], np.ndarray]


@dataclass(frozen=True)
class World:
    """Per bucket: start (us), requests, prompt and cached tokens, the true hit rate."""

    bucket_us: np.ndarray
    requests: np.ndarray
    prompt: np.ndarray
    cached: np.ndarray

    @property
    def hit_rate(self) -> np.ndarray:
        return self.cached / self.prompt

    def at(self, day: float, hour: float = 0.0) -> int:
        """The index of the first bucket at or after that time (days from the start)."""
        when = int(self.bucket_us[0] + day * DAY_US + hour * HOUR_US)
        return int(np.searchsorted(self.bucket_us, when))

    def signal(self, season: bool = True) -> Signal:
        return Signal(
            hit_rate=self.hit_rate,
            tokens=self.prompt,
            requests=self.requests,
            bucket_us=self.bucket_us,
            season=season_of(self.bucket_us, self.cached, self.prompt, BUCKET_S)
            if season
            else Season.none(len(self.bucket_us)),
        )

    def series(self) -> Series:
        from service.analytics.definitions import SUM_COLUMNS

        n = len(self.bucket_us)
        sums = {c: np.zeros(n, np.int64) for c in SUM_COLUMNS}
        sums["requests"] = self.requests.astype(np.int64)
        sums["prompt_tokens"] = self.prompt.astype(np.int64)
        sums["cached_tokens"] = self.cached.astype(np.int64)
        zeros = np.zeros(n, np.int64)
        return Series(self.bucket_us, sums, zeros, zeros)


def traffic_curve(bucket_us: np.ndarray, night: float, weekend: float) -> np.ndarray:
    """Relative traffic (peak 1): nights at `night`, a day from 7:00 to 21:00."""
    hour = (bucket_us % DAY_US) / HOUR_US
    phase = np.clip((hour - 7.0) / 14.0, 0.0, 1.0)
    curve = night + (1.0 - night) * np.sin(np.pi * phase) ** 1.5
    weekday = (bucket_us // DAY_US + 3) % 7
    return np.where(weekday >= 5, curve * weekend, curve)


def world(
    *changes: Change,
    days: int = 14,
    peak: float = 60.0,
    night: float = 0.08,
    weekend: float = 0.4,
    base: float = 0.85,
    lull: float = 0.5,
    seed: int = 0,
) -> World:
    """`days` from a Monday, `peak` requests a bucket at the busiest; the hit rate is
    `base - lull * (1 - traffic)^2`, then each change applied to (bucket_us, rate)."""
    rng = np.random.default_rng(seed)
    bucket_us = MONDAY * DAY_US + np.arange(days * 86_400 // BUCKET_S) * BUCKET_S * 1_000_000
    curve = traffic_curve(bucket_us, night, weekend)
    requests = rng.poisson(peak * curve).astype(np.float64)
    rate = base - lull * (1.0 - curve) ** 2
    for change in changes:
        rate = change(bucket_us, rate)
    keep = requests > 0
    bucket_us, requests, rate = bucket_us[keep], requests[keep], rate[keep]
    # Each request's hit fraction spreads by 0.25 around the rate.
    observed = np.clip(rate + rng.normal(0.0, 0.25, len(rate)) / np.sqrt(requests), 0.0, 1.0)
    prompt = requests * TOKENS_PER_REQUEST
    return World(bucket_us.astype(np.int64), requests, prompt, observed * prompt)


def step(day: float, hour: float, hours: float, by: float) -> Change:
    """The hit rate `by` lower for `hours` from that time (days from the start)."""

    def change(bucket_us: np.ndarray, rate: np.ndarray) -> np.ndarray:
        start = bucket_us[0] + int(day * DAY_US + hour * HOUR_US)
        inside = (bucket_us >= start) & (bucket_us < start + int(hours * HOUR_US))
        return np.where(inside, np.clip(rate - by, 0.0, 1.0), rate)

    return change


def erosion(day: float, per_day: float) -> Change:
    """The hit rate falling `per_day` a day from that day on."""

    def change(bucket_us: np.ndarray, rate: np.ndarray) -> np.ndarray:
        start = bucket_us[0] + int(day * DAY_US)
        days = np.maximum(0.0, (bucket_us - start) / DAY_US)
        return np.clip(rate - per_day * days, 0.0, 1.0)

    return change
