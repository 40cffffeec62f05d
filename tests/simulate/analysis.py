"""Hit rate per time bucket (sum cached_tokens / sum prompt_tokens), to check
what a scenario really does to the hit rate: an independent count over the
simulator's records, the ground truth the simulator tests compare with."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
import numpy.typing as npt

from service.simulate import token_counts

FloatArray = npt.NDArray[np.float64]


def parse_ts_s(value: str | float | int) -> float:
    """A record's `ts` (as this package writes it, or epoch seconds) -> epoch seconds."""
    if isinstance(value, int | float):
        return float(value)
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


@dataclass
class Buckets:
    """Token sums per bucket; bucket i covers [origin + i*bucket_s, origin + (i+1)*bucket_s)."""

    origin_s: float
    bucket_s: float
    requests: FloatArray
    prompt_tokens: FloatArray
    cached_tokens: FloatArray

    @property
    def hit_rate(self) -> FloatArray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.prompt_tokens > 0, self.cached_tokens / self.prompt_tokens, np.nan)

    def _range(self, from_s: float, to_s: float) -> slice:
        lo = max(0, int(np.ceil(from_s / self.bucket_s)))
        hi = max(lo, int(to_s // self.bucket_s))
        return slice(lo, hi)

    def window(self, from_s: float, to_s: float) -> float:
        """Token-weighted hit rate of the whole buckets within [from_s, to_s)
        (seconds since the origin)."""
        part = self._range(from_s, to_s)
        prompt = float(self.prompt_tokens[part].sum())
        return float(self.cached_tokens[part].sum()) / prompt if prompt else float("nan")

    def rates(self, from_s: float, to_s: float) -> FloatArray:
        """Per-bucket hit rates of the whole buckets within [from_s, to_s)."""
        return self.hit_rate[self._range(from_s, to_s)]


def _sums(index: npt.NDArray[np.int64], values: list[int], size: int) -> FloatArray:
    weights = np.asarray(values, dtype=np.float64)
    return np.bincount(index, weights=weights, minlength=size).astype(np.float64)


def bucket_hit_rates(
    records: Iterable[dict[str, Any]],
    bucket_s: float = 300.0,
    origin: datetime | float | None = None,
) -> Buckets:
    """Bucket records by `ts`; `origin` (a datetime or epoch seconds) is bucket
    0's start, by default the first record's time."""
    origin_s = origin.timestamp() if isinstance(origin, datetime) else origin
    index: list[int] = []
    prompt: list[int] = []
    cached: list[int] = []
    for record in records:
        t = parse_ts_s(record["ts"])
        if origin_s is None:
            origin_s = t
        index.append(int((t - origin_s) // bucket_s))
        prompt_tokens, cached_tokens = token_counts(record)
        prompt.append(prompt_tokens)
        cached.append(cached_tokens)
    idx = np.asarray(index, dtype=np.int64)
    if len(idx) and idx.min() < 0:
        raise ValueError("a record lies before the origin")
    size = int(idx.max()) + 1 if len(idx) else 0
    return Buckets(
        origin_s=origin_s or 0.0,
        bucket_s=bucket_s,
        requests=np.bincount(idx, minlength=size).astype(np.float64),
        prompt_tokens=_sums(idx, prompt, size),
        cached_tokens=_sums(idx, cached, size),
    )
