"""Replica-count changes inferred from the records (contract section 3).

The count is the number of replicas serving a (service, model), read at the end of
every detection bucket. A replica counts from its first request until the traffic
proves it gone: a replica that served within the trailing hour always counts, and
one silent for longer still counts until the traffic since its last request would
have reached it many times over. A replica counts as new only when the traffic
before its first request would have reached it many times over too; otherwise it
is taken to have served all along, unseen. A new count becomes a change only when
it holds for `persist` buckets.

Why volume and not time: behind prefix-affinity routing a quiet night's few
sessions, or an early user's long session, can keep every request on one replica
for hours (simulated 2-4 replica fleets went up to ~57 requests per replica past a
replica that still served). Silence proves absence only once the traffic since
could not have missed it by chance, and a quiet night never carries that much.

The rows may start before `report_from_us` (the caller reads a warm-up period
before its window): they say which replicas already served, and no change inside
them is reported. Where the window starts then does not matter, so every pass
infers the same changes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import polars as pl

Counts = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class ReplicaChange:
    """At the end of bucket `bucket_us` the count became `replicas`; `added` and
    `removed` name the replicas that came and went (to date the event exactly)."""

    bucket_us: int
    replicas: int
    previous: int
    added: tuple[str, ...]
    removed: tuple[str, ...]


@dataclass(frozen=True)
class Evidence:
    """How much traffic proves a replica's silence (requests per replica counted,
    i.e. multiplied by the count): `hour` in the trailing hour at the moment of the
    verdict (a quiet night's hours never reach it), `gone` since the last request of
    a replica that went away, `new` before the first request of one never seen in
    the rows. `new` is lower than `gone` because the rows' start is rarely a fleet's
    start: only cachewatch's first hours, or a replica name never seen in the
    warm-up day; docs/lab.md's scale-out came 14 minutes after the first record,
    with ~68 requests per replica (4) before it."""

    hour: int = 20
    gone: int = 100
    new: int = 50


def _per_bucket(rows: pl.DataFrame, bucket_us: int) -> tuple[int, list[str], npt.NDArray[np.int64]]:
    """(first bucket start, replica names, requests per (bucket, replica))."""
    minute_starts = rows["bucket_us"].to_numpy().astype(np.int64)
    first = int(minute_starts.min()) // bucket_us * bucket_us
    last = int(minute_starts.max()) // bucket_us * bucket_us
    names = sorted(set(rows["replica"].to_list()))
    index = {name: i for i, name in enumerate(names)}
    per_bucket = np.zeros(((last - first) // bucket_us + 1, len(names)), dtype=np.int64)
    slots = (minute_starts - first) // bucket_us
    cols = np.array([index[r] for r in rows["replica"].to_list()], dtype=np.int64)
    np.add.at(per_bucket, (slots, cols), rows["requests"].to_numpy().astype(np.int64))
    return first, names, per_bucket


def _trailing(per_bucket: npt.NDArray[np.int64], span: int) -> npt.NDArray[np.int64]:
    """Requests per replica within the `span` buckets ending with each bucket."""
    n = len(per_bucket)
    cumulative = np.vstack([np.zeros((1, per_bucket.shape[1]), np.int64), per_bucket.cumsum(0)])
    starts = np.maximum(np.arange(n) + 1 - span, 0)
    result: npt.NDArray[np.int64] = cumulative[np.arange(n) + 1] - cumulative[starts]
    return result


def _presence(per_bucket: npt.NDArray[np.int64], span: int, evidence: Evidence) -> Mask:
    """Which replicas count at the end of each bucket: one scan, bucket by bucket.

    A replica joins at its first request. If it was never seen before in the rows,
    and the traffic before (and in the trailing hour before) would not have reached
    it many times over, nothing says it was absent: it counts from the rows' start,
    as a replica that served unseen (a quiet start, or a warm-up day's quiet edge).
    A replica that was proven gone and serves again simply joins: its absence was
    proven. A counted replica is proven gone at the end of the first bucket where it
    has no request in the trailing hour, that hour held `evidence.hour` requests per
    counted replica, and the traffic since its last request `evidence.gone`. The
    count a replica is weighed against is the one counted at that moment (a replica
    that later turns out to have served unseen is not in it yet)."""
    n_buckets, n_names = per_bucket.shape
    total = per_bucket.sum(axis=1)
    before = np.concatenate([[0], np.cumsum(total)])  # traffic in buckets < k
    trailing = _trailing(per_bucket, span)
    volume = trailing.sum(axis=1)
    counted = np.zeros(n_names, dtype=bool)
    last = np.full(n_names, -1, dtype=np.int64)  # last bucket with a request, -1: never
    present = np.zeros((n_buckets, n_names), dtype=bool)
    for k in range(n_buckets):
        serving = per_bucket[k] > 0
        unseen = serving & (last < 0)
        if unseen.any():
            n = int(counted.sum() + (serving & ~counted).sum())
            hour_before = int(volume[k - 1]) if k else 0
            if before[k] < evidence.new * n or hour_before < evidence.hour * n:
                present[:k, unseen] = True
        counted |= serving
        last[serving] = k
        silent = counted & (trailing[k] == 0)
        if silent.any():
            n = int(counted.sum())
            since_last = before[k + 1] - before[last + 1]
            gone = silent & (since_last >= evidence.gone * n)
            if volume[k] >= evidence.hour * n:
                counted &= ~gone
        present[k] = counted
    return present


def _changes(
    present: Mask, persist: int, bucket_starts: Counts, report_from_us: int
) -> list[tuple[int, int, int, Mask, Mask]]:
    """(bucket index, count, previous, added, removed) where the count changed and
    held for `persist` buckets; the ones before `report_from_us` set the count
    without being reported."""
    counts = present.sum(axis=1)
    found: list[tuple[int, int, int, Mask, Mask]] = []
    current, current_set = int(counts[0]), present[0]
    k = 1
    while k < len(counts):
        count = int(counts[k])
        held = k + persist <= len(counts) and bool((counts[k : k + persist] == count).all())
        if count != current and held:
            if bucket_starts[k] >= report_from_us:
                now_set = present[k]
                found.append((k, count, current, now_set & ~current_set, current_set & ~now_set))
            current, current_set = count, present[k]
            k += persist
            continue
        if count == current:
            current_set = present[k]
        k += 1
    return found


def replica_changes(
    minutes: pl.DataFrame,
    bucket_s: int,
    *,
    window_s: int = 3600,
    persist: int = 3,
    evidence: Evidence = Evidence(),
    report_from_us: int | None = None,
) -> list[ReplicaChange]:
    """`minutes`: rows (bucket_us, replica, requests) of one (service, model); the
    changes at or after `report_from_us` (all when None). Linear in the buckets
    times the replicas."""
    rows = minutes.filter(pl.col("replica") != "")
    if rows.is_empty():
        return []
    bucket_us = bucket_s * 1_000_000
    first, names, per_bucket = _per_bucket(rows, bucket_us)
    present = _presence(per_bucket, max(1, window_s * 1_000_000 // bucket_us), evidence)
    starts = first + np.arange(len(per_bucket), dtype=np.int64) * bucket_us
    since = first if report_from_us is None else report_from_us
    return [
        ReplicaChange(
            bucket_us=int(starts[k]),
            replicas=count,
            previous=previous,
            added=tuple(n for n, a in zip(names, added, strict=True) if a),
            removed=tuple(n for n, r in zip(names, removed, strict=True) if r),
        )
        for k, count, previous, added, removed in _changes(present, persist, starts, since)
    ]
