"""TTFT histograms with logarithmic bins, mergeable by adding counts.

A percentile read from them is within +-1% of the exact sample value (DDSketch's
idea: bin i covers (FLOOR * GAMMA^(i-1), FLOOR * GAMMA^i]), whatever the range of
latencies, so rollups can be summed over any time range and still give p50 and p95
without keeping raw values. Stored sparse: (uint16 bin, uint32 count) pairs."""

import math

import numpy as np
import numpy.typing as npt
import polars as pl

GAMMA = 1.02
FLOOR_MS = 0.01  # everything at or below falls in bin 0
MAX_BIN = 65535
_PAIR = np.dtype([("bin", "<u2"), ("count", "<u4")])
PAIR_BYTES = _PAIR.itemsize
_LOG_GAMMA = math.log(GAMMA)


def bin_expr(ttft_ms: pl.Expr) -> pl.Expr:
    """The bin index of each latency, as a Polars expression (null stays null)."""
    scaled = (ttft_ms / FLOOR_MS).log() / _LOG_GAMMA
    return (
        pl.when(ttft_ms <= FLOOR_MS)
        .then(0)
        .otherwise(scaled.ceil().clip(1, MAX_BIN))
        .cast(pl.UInt16)
    )


def bin_value(bins: npt.NDArray[np.integer]) -> npt.NDArray[np.float64]:
    """A representative latency of each bin: the point whose relative distance to
    both bin edges is equal, so the error is at most (GAMMA - 1) / (GAMMA + 1)."""
    upper = FLOOR_MS * np.power(GAMMA, bins.astype(np.float64))
    return np.where(bins == 0, 0.0, upper * 2.0 / (1.0 + GAMMA))


def encode(bins: list[int], counts: list[int]) -> bytes:
    pairs = np.empty(len(bins), dtype=_PAIR)
    pairs["bin"] = bins
    pairs["count"] = counts
    return pairs.tobytes()


def decode(blob: bytes | None) -> tuple[npt.NDArray[np.uint16], npt.NDArray[np.uint32]]:
    if not blob:
        return np.empty(0, np.uint16), np.empty(0, np.uint32)
    pairs = np.frombuffer(blob, dtype=_PAIR)
    return pairs["bin"], pairs["count"]


def percentile(
    bins: npt.NDArray[np.integer], counts: npt.NDArray[np.integer], q: float
) -> float | None:
    """Nearest-rank percentile q (0..1) of a histogram given as bins and counts."""
    total = int(counts.sum())
    if total == 0:
        return None
    order = np.argsort(bins, kind="stable")
    cumulative = np.cumsum(counts[order])
    rank = max(1, math.ceil(q * total))
    position = int(np.searchsorted(cumulative, rank))
    return float(bin_value(bins[order][position : position + 1])[0])
