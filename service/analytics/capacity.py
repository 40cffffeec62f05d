"""The capacity curve of contract section 4: LRU hit rate for every cache size,
from one pass.

Mattson, Gecsei, Slutz and Traiger (1970): an LRU cache of K blocks holds exactly
the K most recently touched distinct blocks, so a block is resident iff its
*stack distance* (the number of distinct blocks touched since its own last touch)
is below K. One distance per block access therefore answers every K at once.

A request's hit is judged against the cache *before* it touches its blocks, so
the distance of its block j counts the distinct blocks touched between that
block's last touch and the start of the request. Its leading resident run for K
is the number of leading blocks whose running maximum distance is below K.

Distances are offline 2D dominance counts: with e(i) the next access after i of
access i's block, the distinct blocks touched in (p, s) are the accesses i in
(p, s) with e(i) >= s (the last touch of each block in the range). They are
counted with a Fenwick-style decomposition of [0, x) into aligned power-of-two
chunks, each chunk's e values sorted once per level, then one vectorized
binary search per level: O(N log^2 N) NumPy work, no Python loop per access.

Only requests with `block_hashes` take part (`prefix_key`-only requests carry
no blocks to cache and are skipped). Blocks of different models never match.
The capacity in blocks is floor(C / block_size) with the most common block size
among the participating requests; each request's hit counts its own block size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from service.analytics._arrays import (
    I64,
    Ints,
    codes,
    group_sort,
    index_dtype,
    offsets_of,
    unpack_blobs,
)

#: A bounded replay (the dashboard's figure, the eviction finding) takes the newest
#: this many requests with block hashes of the model in its range.
REPLAY_MAX_REQUESTS = 20_000


@dataclass(frozen=True)
class CapacityPoint:
    tokens: int
    hit_rate: float | None


@dataclass(frozen=True)
class CapacityResult:
    """`ceiling`: the hit rate with unbounded capacity, i.e. cacheable_fraction
    with W unbounded over the same requests. None when no request has blocks."""

    block_size: int | None
    ceiling: float | None
    points: list[CapacityPoint]


def capacity_curve(frame: pl.DataFrame, sizes_tokens: Sequence[int]) -> CapacityResult:
    """LRU replay of the requests with `block_hashes` in (ts_us, id) order, as the
    token hit rate for each capacity in `sizes_tokens` (see the module docstring)."""
    req = replayed_requests(frame)
    if req.height == 0:
        return CapacityResult(None, None, [CapacityPoint(int(c), None) for c in sizes_tokens])
    flat, counts = unpack_blobs(req["block_hashes"])
    (model,) = codes(req["model"])
    prompt = req["prompt_tokens"].to_numpy().astype(np.int64)
    bsizes = req["block_size"].to_numpy().astype(np.int64)
    block_size = most_common(bsizes)

    groups = np.repeat(model.astype(np.int64), counts) if model.max() > 0 else None
    running_max = running_max_distance(flat, groups, counts)
    offsets = offsets_of(counts)
    total = int(prompt.sum())

    never = len(flat) + 1  # the distance of a first access: resident in no cache

    def hit_rate(capacity_blocks: int) -> float | None:
        if total == 0:
            return None
        # Any capacity above every finite distance is the unbounded cache.
        resident = (running_max < min(capacity_blocks, never)).astype(np.int64)
        run = np.add.reduceat(resident, offsets)
        return float(np.minimum(prompt, run * bsizes).sum()) / total

    ceiling = hit_rate(never)
    points = [
        CapacityPoint(int(c), hit_rate(int(c) // block_size if block_size > 0 else 0))
        for c in sizes_tokens
    ]
    return CapacityResult(block_size, ceiling, points)


def replayed_requests(frame: pl.DataFrame) -> pl.DataFrame:
    """The requests a replay takes part in (those with block hashes), typed, in
    (ts_us, id) order: the exact replay's and the sampled one's (shards.py)."""
    return (
        frame.select(
            pl.col("ts_us").cast(pl.Int64),
            pl.col("id").cast(pl.Int64),
            pl.col("model").cast(pl.String),
            pl.col("prompt_tokens").cast(pl.Int64).fill_null(0),
            pl.col("block_size").cast(pl.Int64).fill_null(0),
            pl.col("block_hashes").cast(pl.Binary),
        )
        .filter(pl.col("block_hashes").bin.size().fill_null(0) > 0)
        .sort(["ts_us", "id"])
    )


def most_common(values: I64) -> int:
    uniq, count = np.unique(values, return_counts=True)
    return int(uniq[np.argmax(count)])  # ties: the smaller size


def running_max_distance(keys: I64, groups: I64 | None, counts: I64) -> I64:
    """Per access, the maximum stack distance over its request's blocks so far.

    A first-ever access has distance len(keys) + 1 (never resident)."""
    n_acc = len(keys)
    n_req = len(counts)
    idx = index_dtype(n_acc + 1)
    request = np.repeat(np.arange(n_req, dtype=idx), counts)
    first_of_request = offsets_of(counts).astype(idx)

    perm = group_sort(keys, groups)
    sk = keys[perm]
    same = np.zeros(n_acc, dtype=np.bool_)
    same[1:] = sk[1:] == sk[:-1]
    if groups is not None:
        sg = groups[perm]
        same[1:] &= sg[1:] == sg[:-1]
        del sg
    del sk
    # Distinct blocks touched before access x: first accesses before x.
    first_access = np.empty(n_acc, dtype=np.bool_)
    first_access[perm] = ~same
    distinct_before = np.zeros(n_acc + 1, dtype=np.int64)
    np.cumsum(first_access, out=distinct_before[1:])
    del first_access
    # e(i): the next access of the same block (any request), or n_acc.
    nxt_sorted = np.full(n_acc, n_acc, dtype=idx)
    nxt_sorted[:-1] = np.where(same[1:], perm[1:], n_acc)
    nxt = np.empty(n_acc, dtype=idx)
    nxt[perm] = nxt_sorted
    del nxt_sorted
    # p: the last access before the request (skip the request's own earlier copies).
    req_sorted = request[perm]
    same_req = same.copy()
    same_req[1:] &= req_sorted[1:] == req_sorted[:-1]
    del req_sorted
    run_start = np.arange(n_acc, dtype=idx)
    run_start[same_req] = 0
    del same_req
    np.maximum.accumulate(run_start, out=run_start)
    has_prev_sorted = same[run_start]
    run_start -= 1
    np.maximum(run_start, 0, out=run_start)
    prev_sorted = perm[run_start].astype(idx)
    del run_start
    prev_sorted[~has_prev_sorted] = -1
    prev = np.empty(n_acc, dtype=idx)
    prev[perm] = prev_sorted
    del prev_sorted, has_prev_sorted, same, perm

    # d = #{i in (p, s): e(i) >= s} = F(s, s) - F(p + 1, s) with
    # F(x, y) = #{i < x: e(i) >= y}; F(s, s) is simply the distinct blocks before s.
    q = np.flatnonzero(prev >= 0)
    s_q = first_of_request[request[q]]
    f = _count_before_at_least(nxt, prev[q] + 1, s_q)
    del nxt, prev
    distance = np.full(n_acc, n_acc + 1, dtype=np.int64)
    distance[q] = distinct_before[s_q] - f
    del q, s_q, f, distinct_before

    # Prefix maximum within each request: lift each request above the previous.
    lift = request.astype(np.int64) * (n_acc + 2)
    distance += lift
    np.maximum.accumulate(distance, out=distance)
    distance -= lift
    return distance


def _count_before_at_least(e: Ints, xs: Ints, ys: Ints) -> I64:
    """For each query (x, y): #{i < x : e[i] >= y}, all queries at once.

    [0, x) splits into aligned chunks of size 2^l, one per set bit l of x (a
    Fenwick tree's ranges). Level l keeps, per chunk, its e values sorted; as keys
    chunk * B + e in one sorted array, a chunk's count of e >= y is one
    searchsorted. Level l + 1 merges pairs of level-l chunks (already sorted runs,
    which the stable sort's run merging handles in near-linear time)."""
    n = len(e)
    big = n + 1  # e <= n
    # Queries in x order: each level's searches then walk the keys nearly in order
    # (chunk = x >> level is monotone), which is ~15x faster than random searches.
    order = np.argsort(xs, kind="stable")
    xs, ys = xs[order], ys[order]
    out = np.zeros(len(xs), dtype=np.int64)
    pos = np.arange(n, dtype=index_dtype(n + 1))
    chunk_at = pos  # chunk id of each position at the current level
    level_keys = np.multiply(pos, big, dtype=np.int64)
    level_keys += e
    level = 0
    while (1 << level) <= n:
        size = 1 << level
        sel = np.flatnonzero((xs >> level) & 1)
        if len(sel):
            chunk = (xs[sel] >> level).astype(np.int64) - 1
            upper = np.minimum((chunk + 1) * size, n)
            out[sel] += upper - np.searchsorted(level_keys, chunk * big + ys[sel])
        # Chunks sit at fixed positions, so re-keying to the next level's chunk
        # needs no division: subtract the difference of chunk ids, then merge.
        chunk_next = pos >> (level + 1)
        level_keys -= np.multiply(chunk_at - chunk_next, big, dtype=np.int64)
        level_keys.sort(kind="stable")
        chunk_at = chunk_next
        level += 1
    result = np.empty_like(out)
    result[order] = out
    return result
