"""Usage records in ClickHouse: their ids, their insert, and the pass's reads.

Ids. ClickHouse has no sequence, so each API process makes its own, in the layout
of Twitter's Snowflake: milliseconds since the epoch (41 bits), a process salt
leased from the relational database (10 bits: service.clickhouse.ids), a counter
within the millisecond (12 bits). They increase with
arrival within a process and break ties between equal `ts_us` as the relational
ids do. Their time part is what makes a cursor possible: a record received at t
or later has an id of at least `id_floor(t)`, so the pass, having waited out the
inserts in flight, reads up to `id_floor(now - lag)` (`visible_high_id`) and no
later insert can fall below it, on any API host whose clock is within the lag.

Duplicates. A record whose request_id is stored is a duplicate (contract
section 1): the insert looks its request_ids up first and stores only the new
ones, under a lock its caller holds until the insert is written
(`service.repository.usage`: an advisory lock on PostgreSQL, the write lock on
SQLite), so two inserts with one request_id are told apart exactly: the second
finds the first's copy stored and counts it as a duplicate. Within one process
the batches of concurrent requests share an insert (`group_commit`), in which the
earlier batch's copy is the one stored.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import numpy as np
import polars as pl
import pyarrow as pa

from service.clickhouse.client import ClickHouse
from service.clickhouse.ids import IdSource, id_floor
from service.timeunits import HOUR_US
from service.usage_row import USAGE_COLUMNS

#: ReplacingMergeTree keeps the highest version: the lowest id, the first received.
_VERSION_BASE = 2**63 - 1


def hour_of(ts_us: int) -> int:
    """The hour of the tables' sorting key, `intDiv(ts_us, 3600000000)`: ClickHouse
    divides toward zero, Python's `//` toward minus infinity."""
    hours = abs(int(ts_us)) // HOUR_US
    return -hours if ts_us < 0 else hours


def stored_request_ids(ch: ClickHouse, keys: Sequence[tuple[str, int]]) -> set[str]:
    """Which of the (request_id, ts_us) are stored. Looked up by (hour,
    request_id), the sorting key's prefix, so the read is the granules of the
    batch's hours that hold its ids, whatever the table's size: a retry or a
    replayed copy carries its record's ts (a copy stored in an hour of none of the
    batch's records is not found: a new record here; docs/deployment.md,
    "Duplicates"). The ids go as a set apart from the statement (`query_in`)."""
    found: set[str] = set()
    for start in range(0, len(keys), 5000):
        chunk = keys[start : start + 5000]
        frame = ch.query_in(stored_sql(chunk), [r for r, _ in chunk], {"request_id": pl.String()})
        found.update(frame["request_id"].to_list())
    return found


def stored_sql(keys: Sequence[tuple[str, int]]) -> str:
    """The stored request_ids of (request_id, ts_us) pairs (`stored_request_ids`),
    the ids as `{values}` (`ClickHouse.query_in`): a set of hours and a set of
    ids, both of the sorting key, so the primary key narrows the read to those
    hours' granules holding those ids. (A list of (hour, id) tuples says the same,
    but 18.16 parses 10,000 tuples in 0.15 s.)"""
    hours = ", ".join(str(h) for h in sorted({hour_of(ts) for _, ts in keys}))
    return (
        "SELECT DISTINCT request_id FROM usage_records "
        f"WHERE intDiv(ts_us, {HOUR_US}) IN ({hours}) AND request_id IN {{values}}"
    )


def block_lists(blobs: Sequence[bytes | None]) -> pl.Series:
    """The packed blobs (service.ingest.hashing) as a List(Int64) column (None: an
    empty list), built as Arrow builds one: a flat array of every hash and each
    row's offset into it: no grouping by row, and no Python list per row (which
    cost 40 us a record)."""
    n = len(blobs)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(
        np.fromiter((len(b) >> 3 if b else 0 for b in blobs), dtype=np.int64, count=n),
        out=offsets[1:],
    )
    flat = np.frombuffer(b"".join(b for b in blobs if b), dtype="<i8")
    lists = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(flat, pa.int64()))
    return pl.Series("block_hashes", lists, dtype=pl.List(pl.Int64))


def usage_batch(values: Iterable[tuple[Any, ...]]) -> pl.DataFrame | None:
    """The rows as the table's columns, all but the ids (None: no rows). Built
    before the insert lock is taken (`service.repository.usage`): the conversions
    are most of a batch's own work, and need no lock."""
    rows = list(values)
    if not rows:
        return None
    columns = list(zip(*rows, strict=True))
    data: dict[str, Any] = dict(zip(USAGE_COLUMNS, columns, strict=True))
    blobs = data.pop("block_hashes")
    return pl.DataFrame(
        {
            **{name: pl.Series(name, data[name], dtype=_DTYPES[name]) for name in data},
            "has_blocks": pl.Series([b is not None for b in blobs], dtype=pl.UInt8),
            "block_hashes": block_lists(blobs),
        }
    )


def insert_batches(ch: ClickHouse, batches: Sequence[pl.DataFrame], ids: IdSource) -> list[int]:
    """Insert, as one insert, the rows of `usage_batch` frames whose request_id is
    neither stored nor in an earlier batch of `batches`, with new ids in their
    order; under the insert lock (module docstring). Returns how many of each
    batch went in (`group_commit`: the batches of concurrent requests)."""
    frame = pl.concat(
        [b.with_columns(pl.lit(i, pl.UInt32).alias(_BATCH)) for i, b in enumerate(batches)],
        how="vertical",
        rechunk=False,
    )
    stored = stored_request_ids(ch, list(zip(frame["request_id"], frame["ts_us"], strict=True)))
    keep = frame["request_id"].is_first_distinct()
    if stored:
        keep &= ~frame["request_id"].is_in(list(stored))
    frame = frame.filter(keep)
    counts = frame[_BATCH].value_counts()
    accepted = dict(zip(counts[_BATCH], counts["count"], strict=True))
    if frame.height:
        new_ids = ids.take(frame.height)
        ids_columns = {"id": new_ids, "version": (_VERSION_BASE - new_ids).astype(np.uint64)}
        ch.insert("usage_records", pl.DataFrame(ids_columns).hstack(frame.drop(_BATCH)))
    return [accepted.get(i, 0) for i in range(len(batches))]


#: `insert_batches`' column naming each row's batch (never stored).
_BATCH = "_cw_batch"


_DTYPES: dict[str, pl.DataType] = {
    "request_id": pl.String(),
    "ts_us": pl.Int64(),
    "received_us": pl.Int64(),
    "service": pl.String(),
    "model": pl.String(),
    "prompt_tokens": pl.Int64(),
    "cached_tokens": pl.Int64(),
    "completion_tokens": pl.Int64(),
    "ttft_ms": pl.Float64(),
    "latency_ms": pl.Float64(),
    "replica": pl.String(),
    "deploy": pl.String(),
    "session_id": pl.String(),
    "cache_key": pl.String(),
    "tenant": pl.String(),
    "block_size": pl.Int64(),
    "prefix_hash": pl.String(),
    "prefix_key": pl.Int64(),
    "prefix_tokens": pl.Int64(),
    "segments": pl.String(),
    "attributes": pl.String(),
    "cache_write_tokens": pl.Int64(),
    "cache_ttl_s": pl.Float64(),
    "provider": pl.String(),
    "scenario": pl.String(),
    "cache_write_1h_tokens": pl.Int64(),
    "provider_miss_reason": pl.String(),
    "provider_missed_tokens": pl.Int64(),
}


def visible_high_id(ch: ClickHouse, lag_s: float, now_us: int | None = None) -> int:
    """The highest id the pass may read up to: every record below it is visible
    (module docstring), and none above it is needed yet."""
    now = time.time_ns() // 1000 if now_us is None else now_us
    newest = int(ch.query("SELECT max(id) AS m FROM usage_records")["m"][0] or 0)
    return min(newest, id_floor(now - round(lag_s * 1_000_000)) - 1)


class NewRecords(NamedTuple):
    """The records with ids in (after_id, high_id]: how many, their earliest ts,
    the earliest of the late ones (at or before the watermark; None: none late),
    and the newest (ts, id)."""

    n: int
    first_ts: int
    first_late_ts: int | None
    newest: tuple[int, int]


def new_records(
    ch: ClickHouse, after_id: int, high_id: int, mark: tuple[int, int] | None
) -> NewRecords:
    late = "0"
    if mark is not None:
        late = f"ts_us < {int(mark[0])} OR (ts_us = {int(mark[0])} AND id <= {int(mark[1])})"
    frame = ch.query(
        f"""SELECT count() AS n, min(ts_us) AS first, countIf({late}) AS n_late,
                   minIf(ts_us, {late}) AS first_late,
                   argMax(ts_us, (ts_us, id)) AS newest_ts, max((ts_us, id)).2 AS newest_id
            FROM usage_records WHERE id > {int(after_id)} AND id <= {int(high_id)}"""
    )
    row = frame.row(0, named=True)
    return NewRecords(
        int(row["n"]),
        int(row["first"] or 0),
        int(row["first_late"]) if row["n_late"] else None,
        (int(row["newest_ts"] or 0), int(row["newest_id"] or 0)),
    )


def hour_counts(ch: ClickHouse, where: str) -> tuple[list[int], list[int]]:
    """The records matching `where` by hour of the sorting key: each hour's first
    ts and count, in time order (the analytics pass cuts its steps on them)."""
    frame = ch.query(
        f"SELECT min(ts_us) AS first, count() AS n FROM usage_records WHERE {where} "
        f"GROUP BY intDiv(ts_us, {HOUR_US}) ORDER BY first",
        {"first": pl.Int64(), "n": pl.Int64()},
    )
    return frame["first"].to_list(), frame["n"].to_list()
