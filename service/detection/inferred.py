"""Replica-count changes inferred from the records (contract section 3).

The count is the number of distinct replicas serving a (service, model) within the
trailing hour, read at the end of every detection bucket: a replica that gets no
request in one bucket of a quiet night still counts, because it served within the
hour. A new count becomes an event only when it holds for `persist` buckets, and a
lower count only when the trailing hour held enough requests for an absent
replica's silence to mean something (`min_requests_per_replica` each)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import polars as pl


@dataclass(frozen=True)
class ReplicaChange:
    """At the end of bucket `bucket_us` the count became `replicas`; `added` and
    `removed` name the replicas that came and went (to date the event exactly)."""

    bucket_us: int
    replicas: int
    previous: int
    added: tuple[str, ...]
    removed: tuple[str, ...]


def _settled(
    counts: npt.NDArray[np.int64],
    volume: npt.NDArray[np.int64],
    span: int,
    persist: int,
    min_requests_per_replica: int,
) -> int:
    """The first bucket whose count is trusted as the fleet's. At the latest the first
    full trailing window: before it the window holds less than an hour, and a quiet
    start would look like replicas arriving one by one as the first requests reach
    them. Earlier once a count has held `persist` buckets while its replicas carried
    `min_requests_per_replica` requests each: a fleet seen steadily, not trickling in.
    Without it a scale-out in cachewatch's first hour went unseen (docs/lab.md: four
    llama-server replicas 14 minutes after the first record; ~30 requests a minute on
    the one before them)."""
    full = min(span, len(counts)) - 1
    for k in range(persist - 1, full):
        held = bool((counts[k - persist + 1 : k + 1] == counts[k]).all())
        if held and volume[k] >= min_requests_per_replica * counts[k]:
            return k
    return full


def replica_changes(
    minutes: pl.DataFrame,
    bucket_s: int,
    *,
    window_s: int = 3600,
    persist: int = 3,
    min_requests_per_replica: int = 20,
) -> list[ReplicaChange]:
    """`minutes`: rows (bucket_us, replica, requests) of one (service, model)."""
    rows = minutes.filter(pl.col("replica") != "")
    if rows.is_empty():
        return []
    bucket_us, window_us = bucket_s * 1_000_000, window_s * 1_000_000
    minute_starts = rows["bucket_us"].to_numpy().astype(np.int64)
    first = int(minute_starts.min()) // bucket_us * bucket_us
    last = int(minute_starts.max()) // bucket_us * bucket_us
    ends = np.arange(first, last + bucket_us, bucket_us, dtype=np.int64) + bucket_us
    names = sorted(set(rows["replica"].to_list()))
    index = {name: i for i, name in enumerate(names)}
    # requests per (detection bucket, replica), then a trailing-window sum per replica
    per_bucket = np.zeros((len(ends), len(names)), dtype=np.int64)
    slots = (minute_starts - first) // bucket_us
    cols = np.array([index[r] for r in rows["replica"].to_list()], dtype=np.int64)
    np.add.at(per_bucket, (slots, cols), rows["requests"].to_numpy().astype(np.int64))
    span = max(1, window_us // bucket_us)
    cumulative = np.vstack([np.zeros((1, len(names)), np.int64), np.cumsum(per_bucket, axis=0)])
    starts = np.maximum(np.arange(len(ends)) + 1 - span, 0)
    trailing = cumulative[np.arange(len(ends)) + 1] - cumulative[starts]
    serving = trailing > 0
    counts = serving.sum(axis=1)
    volume = trailing.sum(axis=1)

    first_full = _settled(counts, volume, span, persist, min_requests_per_replica)
    changes: list[ReplicaChange] = []
    current, current_set = int(counts[first_full]), serving[first_full]
    k = first_full + 1
    while k < len(ends):
        count = int(counts[k])
        held = k + persist <= len(ends) and bool((counts[k : k + persist] == count).all())
        enough = count > current or volume[k] >= min_requests_per_replica * current
        if count != current and held and enough:
            now_set = serving[k]
            changes.append(
                ReplicaChange(
                    bucket_us=int(ends[k] - bucket_us),
                    replicas=count,
                    previous=current,
                    added=tuple(n for n, i in index.items() if now_set[i] and not current_set[i]),
                    removed=tuple(n for n, i in index.items() if current_set[i] and not now_set[i]),
                )
            )
            current, current_set = count, now_set
            k += persist
            continue
        if count == current:
            current_set = serving[k]
        k += 1
    return changes
