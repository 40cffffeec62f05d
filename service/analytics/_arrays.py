"""NumPy building blocks shared by the analytics passes.

Everything here works on flat arrays: one row per block occurrence, grouped by a
*source* (the request, or a remembered state entry, that carried the block). The
passes never loop over blocks in Python; the only per-row Python work is joining
the stored blobs into one buffer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
F64 = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]
Ints = npt.NDArray[np.integer]

#: Stands for an unbounded window: larger than any gap between epoch microseconds,
#: small enough that `ts - UNBOUNDED_US` cannot overflow int64.
UNBOUNDED_US = 2**62

# Rows per chunk where a full-length int64 temporary would cost too much memory.
_CHUNK = 1 << 21
# Below this many rows NumPy's stable sort is as fast as Polars' and needs no check.
_SMALL_SORT = 50_000


def window_us(window_s: float) -> int:
    """The reuse window W in whole microseconds (`inf` means unbounded)."""
    if window_s != window_s or window_s < 0:
        raise ValueError(f"window must be >= 0 seconds, got {window_s}")
    if window_s == float("inf") or window_s * 1e6 >= UNBOUNDED_US:
        return UNBOUNDED_US
    return round(window_s * 1_000_000)


def ints(series: pl.Series) -> I64:
    """An integer column as int64, null as 0."""
    return series.fill_null(0).to_numpy().astype(np.int64, copy=False)


def unpack_blobs(column: pl.Series) -> tuple[I64, I64]:
    """Chained block hashes of each row as one flat int64 array plus per-row counts.

    A null blob and an empty one both give 0 blocks. Joining the blobs into one
    buffer is the cheapest route out of Polars' Binary column without pyarrow
    (about 0.6 s for 1M blobs of 16 blocks)."""
    sizes = column.bin.size().fill_null(0).to_numpy().astype(np.int64)
    if np.any(sizes % 8):
        raise ValueError("block_hashes blobs must be packed int64 (a multiple of 8 bytes)")
    joined = b"".join(column.fill_null(b"").to_list())
    flat = np.frombuffer(joined, dtype="<i8").astype(np.int64, copy=False)
    return flat, sizes // 8


def offsets_of(counts: Ints) -> I64:
    """Start of each segment in a flat array holding `counts[i]` items for row i."""
    out = np.zeros(len(counts), dtype=np.int64)
    if len(counts) > 1:
        np.cumsum(counts[:-1], out=out[1:])
    return out


def codes(*columns: pl.Series) -> list[I32]:
    """Dense int codes for string columns that must share one code space (e.g. the
    models of the stored state and of a new batch). Null gets -1."""
    lengths = [len(c) for c in columns]
    joined = pl.concat([c.cast(pl.String) for c in columns])
    # A dense rank, not a Categorical cast: Polars' categoricals intern strings in a
    # process-wide cache, which would grow with every session id a long-running
    # service ever sees.
    dense = (joined.rank("dense").cast(pl.Int64) - 1).fill_null(-1).to_numpy().astype(np.int32)
    out: list[I32] = []
    start = 0
    for n in lengths:
        out.append(dense[start : start + n])
        start += n
    return out


def index_dtype(n: int) -> type[np.signedinteger[Any]]:
    """int32 row indices while they fit: half the memory of int64 on 16M rows."""
    return np.int32 if n < 2**31 - 1 else np.int64


def stable_argsort(values: Ints) -> Ints:
    """Stable argsort of an integer array: equal values keep their input order.

    Polars' multithreaded arg_sort is 2-3x faster than NumPy's stable sort on
    int64; its stability is not documented, so it is checked (one cheap pass) and
    NumPy's stable sort is the fallback."""
    n = len(values)
    idx = index_dtype(n)
    if n < _SMALL_SORT:
        return np.argsort(values, kind="stable").astype(idx)
    perm = pl.Series(values).arg_sort().to_numpy().astype(idx, copy=False)
    for start in range(0, n - 1, _CHUNK):
        stop = min(start + _CHUNK + 1, n)
        p = perm[start:stop]
        sv = values[p]
        if np.any((sv[1:] == sv[:-1]) & (p[1:] < p[:-1])):
            return np.argsort(values, kind="stable").astype(idx)
    return perm


def group_sort(keys: Ints, groups: Ints | None) -> Ints:
    """Stable order by (group, key): time order survives within each (group, key)
    when rows come in time order. `groups` None means a single group."""
    perm = stable_argsort(keys)
    if groups is not None and len(groups):
        lo, hi = int(groups.min()), int(groups.max())
        if lo != hi:
            # Small non-negative ints: NumPy uses a radix sort for <= 16-bit types.
            g = groups[perm]
            g = g.astype(np.uint16) if lo >= 0 and hi < 2**16 else g.astype(np.int64)
            perm = perm[np.argsort(g, kind="stable")]
    return perm


@dataclass
class Occurrences:
    """Rows sorted by (group, key, source), with each row's previous occurrence.

    `prev_source[i]` is the source of the latest earlier occurrence of row i's
    (group, key) carried by a *different* source (a request that repeats a block
    does not see its own earlier copy), or -1. Arrays are in sorted order; `perm`
    maps sorted position -> input row."""

    perm: Ints
    source: Ints
    prev_source: Ints
    new_group: Bools  # True where a new (group, key) starts

    def group_ids(self) -> Ints:
        return np.cumsum(self.new_group, dtype=index_dtype(len(self.new_group))) - 1


def previous_occurrences(keys: Ints, groups: Ints | None, source: Ints) -> Occurrences:
    """For rows in nondecreasing `source` order (sources in time order), find each
    row's previous occurrence of the same (group, key) from an earlier source."""
    perm = group_sort(keys, groups)
    n = len(perm)
    src = source[perm]
    same_key = np.zeros(n, dtype=np.bool_)
    if n > 1:
        sorted_keys = keys[perm]
        np.equal(sorted_keys[1:], sorted_keys[:-1], out=same_key[1:])
        del sorted_keys
        if groups is not None:
            sorted_groups = groups[perm]
            same_key[1:] &= sorted_groups[1:] == sorted_groups[:-1]
            del sorted_groups
    same_src = same_key.copy()
    if n > 1:
        same_src[1:] &= src[1:] == src[:-1]
    # Start of each run of one source's copies; its predecessor is the answer.
    run_start = np.arange(n, dtype=index_dtype(n))
    run_start[same_src] = 0
    del same_src
    np.maximum.accumulate(run_start, out=run_start)
    has_prev = same_key[run_start]
    run_start -= 1
    np.maximum(run_start, 0, out=run_start)
    prev = src[run_start]
    del run_start
    prev[~has_prev] = -1
    return Occurrences(perm=perm, source=src, prev_source=prev, new_group=~same_key)


def within(ts: I64, later: Ints, earlier: Ints, w_us: int) -> Bools:
    """earlier >= 0 and ts[later] - ts[earlier] <= W, elementwise, computed in
    chunks so no full-length int64 temporaries are needed."""
    out = np.empty(len(later), dtype=np.bool_)
    for start in range(0, len(later), _CHUNK):
        a = later[start : start + _CHUNK]
        b = earlier[start : start + _CHUNK]
        out[start : start + _CHUNK] = (b >= 0) & (ts[a] - ts[b] <= w_us)
    return out


def leading_true(flags: Bools, offsets: I64, counts: Ints) -> I64:
    """Per segment of `flags` (starting at `offsets`, `counts` long), the length of
    its leading run of True."""
    lengths: I64 = np.asarray(counts, dtype=np.int64)
    misses = np.flatnonzero(~flags)
    if len(misses) == 0:
        return lengths.copy()
    idx = np.searchsorted(misses, offsets)
    first = misses[np.minimum(idx, len(misses) - 1)]
    inside = (idx < len(misses)) & (first < offsets + lengths)
    return np.where(inside, first - offsets, lengths).astype(np.int64)
