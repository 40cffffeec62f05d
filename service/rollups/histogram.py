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
PAIR_DTYPE = _PAIR
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


def _dense(groups: int, width: int, pairs: int) -> bool:
    """Whether a (group x bin) matrix is cheaper than sorting the pairs."""
    return groups * width <= max(4 * pairs, 1 << 16)


def group_percentiles(
    group: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    blob: bytes,
    groups: int,
    qs: tuple[float, ...] = (0.50, 0.95),
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.bool_]]:
    """Nearest-rank percentiles (as `percentile`) of many histograms merged per group,
    vectorized: row i (group `group[i]`, `lengths[i]` pairs of the concatenated
    `blob`) adds into its group. Returns values[group, q] and which groups have any
    count.

    Why this way: a month of 5-minute buckets is 8,640 groups; one Python step per
    group or row would cost more than the whole request may. Few groups over few
    bins (totals, day buckets): a dense (group x bin) matrix of counts, no sort.
    Many groups: the pairs sorted by (group, bin) (already so when each group is
    one stored row, bins ascending), one cumulative sum, and a binary search per
    group and percentile."""
    values = np.full((groups, len(qs)), np.nan)
    present = np.zeros(groups, dtype=bool)
    pairs = np.frombuffer(blob, dtype=_PAIR)
    if not len(pairs):
        return values, present
    keys = np.repeat(group, lengths)
    bins = pairs["bin"].astype(np.int64)
    counts = pairs["count"].astype(np.float64)
    low, width = int(bins.min()), int(bins.max() - bins.min()) + 1
    if _dense(groups, width, len(pairs)):
        matrix = np.bincount(keys * width + (bins - low), counts, groups * width)
        cumulative = np.cumsum(matrix.reshape(groups, width), axis=1)
        totals = cumulative[:, -1]
        present = totals > 0
        for j, q in enumerate(qs):
            rank = np.maximum(1, np.ceil(totals * q))
            position = np.argmax(cumulative >= rank[:, None], axis=1)
            values[:, j] = bin_value(position + low)
        return values, present
    step_key, step_bin = np.diff(keys), np.diff(bins)
    if not np.all((step_key > 0) | ((step_key == 0) & (step_bin >= 0))):
        order = np.lexsort((bins, keys))
        keys, bins, counts = keys[order], bins[order], counts[order]
    cumulative = np.cumsum(counts)
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    ends = np.r_[starts[1:], len(keys)]
    before = np.where(starts > 0, cumulative[np.maximum(starts - 1, 0)], 0.0)
    totals = cumulative[ends - 1] - before
    for j, q in enumerate(qs):
        rank = np.maximum(1, np.ceil(totals * q)) + before
        position = np.searchsorted(cumulative, rank)  # first cumulative >= rank
        values[keys[starts], j] = bin_value(bins[position])
    present[keys[starts]] = totals > 0
    return values, present
