"""What the per-request pass remembers between batches, and how late records are
recomputed.

The per-request values of contract section 4 depend on the past in two ways only:

* the reuse window: whether a block is *seen*, and the rewarm cause, depend on
  the most recent earlier occurrence of each (model, block) and, per replica, of
  each (model, block, replica); an occurrence older than W before the newest
  request can never matter again;
* sessions: `history_rewrite` compares a request with the previous request of its
  session, however long ago that was.

`ReuseState` holds exactly that, so running the pass batch after batch gives the
same values as one pass over everything. It is plain data (two Polars frames and
a few integers) and serializes to bytes (Arrow IPC) for the database.

Late records
------------
A forward pass cannot take a record that sorts at or before the state's watermark
(the newest (ts_us, id) processed): its blocks should have been remembered when
the requests after it were computed. `compute_request_metrics` refuses such a
batch (`LateRecordsError`). The caller recomputes instead:

1. `plan = plan_recompute(state, batch)` (None: nothing late, go forward);
2. reload from the database every stored record (the late batch included) with
   `ts_us >= plan.reload_from_ts_us` (everything when it is None), plus, for each
   session in `plan.seed_sessions`, that session's latest record with
   `ts_us < plan.reload_from_ts_us` (extra older records are harmless);
3. `results, state = compute_request_metrics(reloaded, W, state.rewind(plan))`;
4. replace the stored results of requests with `ts_us >= plan.late_from_ts_us`
   by `plan.keep(results)`; earlier stored results stay valid.

Why this is exact: a request r's window values depend only on records in
[ts_r - W, ts_r], so every request at or after the earliest late ts L sees its
whole window once the records from L - W are reloaded; records before that are
over W older than any request kept. Sessions have no window: the rewound state
keeps each session whose last request is before L - W, and the seeds restore the
others' last request before it.

The cost is one reload of W of traffic per batch with late records: the service
should process records a little after they arrive (a grace delay) so that
ordinary shipping jitter is not late.

What a late record can change
-----------------------------
A late record l (ts t) changes the results of two sets of requests only:

* the requests with ts in [t, t + W]: l is a carrier within their window (seen
  blocks, the previous carrier that decides concurrent and expiry, the replica
  that decides eviction). A request after t + W cannot have l within W, and l
  does not change which of its earlier carriers is the most recent within W;
* the next request of l's session after it (its predecessor is now l:
  history_rewrite, is_opening), however far; the ones after keep theirs.

And of the state at the watermark, only l's session's remembered request
(`with_late_sessions`) when l falls over W before the watermark: the entries
hold only carriers within W of the watermark. `late_spans` turns this into the
hours to rebuild; the analytics pass rebuilds each span alone (reloading W before
it and seeding its sessions, as above) and keeps every other hour.
"""

from __future__ import annotations

import io
import json
import struct
from dataclasses import dataclass

import numpy as np
import polars as pl

from service.analytics._arrays import UNBOUNDED_US

#: One row per (model, kind, key, replica): the most recent request that carried the
#: block (kind 0) or prefix_hash key (kind 1) on that replica (null: none given),
#: with its ttft. In no particular order.
ENTRY_SCHEMA: dict[str, pl.DataType] = {
    "model": pl.String(),
    "kind": pl.Int8(),
    "key": pl.Int64(),
    "replica": pl.String(),
    "ts_us": pl.Int64(),
    "id": pl.Int64(),
    "ttft_ms": pl.Float64(),
}

#: One row per session: its latest request, enough to judge the next one.
SESSION_SCHEMA: dict[str, pl.DataType] = {
    "session_id": pl.String(),
    "ts_us": pl.Int64(),
    "id": pl.Int64(),
    "prompt_tokens": pl.Int64(),
    "block_size": pl.Int64(),
    "block_hashes": pl.Binary(),
    # The model it was sent to: whether the next request of the session switched.
    # Null in a state saved before this column (that request's switch is unknown).
    "model": pl.String(),
}

_MAGIC = b"CWRS1"


class LateRecordsError(ValueError):
    """The batch holds records at or before the state's watermark; see
    `plan_recompute` and the module docstring for the recompute path."""

    def __init__(self, plan: RecomputePlan) -> None:
        super().__init__(
            f"records from ts_us={plan.late_from_ts_us} are at or before the state's "
            f"watermark: recompute from ts_us={plan.reload_from_ts_us}"
        )
        self.plan = plan


@dataclass(frozen=True)
class RecomputePlan:
    """What to reload after late records (see the module docstring)."""

    #: The earliest late ts: results of requests from here on change.
    late_from_ts_us: int
    #: Reload every record from here (None: from the very beginning, W unbounded).
    reload_from_ts_us: int | None
    #: Sessions whose latest record before `reload_from_ts_us` must be reloaded too.
    seed_sessions: tuple[str, ...]

    def keep(self, results: pl.DataFrame) -> pl.DataFrame:
        """The recomputed results that replace stored ones (ts_us >= late_from)."""
        return results.filter(pl.col("ts_us") >= self.late_from_ts_us)


@dataclass(frozen=True)
class ReuseState:
    """The per-request pass's memory between batches (see the module docstring).

    `watermark` is the (ts_us, id) of the newest request processed; entries older
    than `watermark ts - window_us` are pruned, they can no longer be seen."""

    window_us: int
    watermark: tuple[int, int] | None
    entries: pl.DataFrame
    sessions: pl.DataFrame

    @classmethod
    def empty(cls, window_us: int) -> ReuseState:
        return cls(
            window_us=window_us,
            watermark=None,
            entries=pl.DataFrame(schema=ENTRY_SCHEMA),
            sessions=pl.DataFrame(schema=SESSION_SCHEMA),
        )

    @property
    def unbounded(self) -> bool:
        return self.window_us >= UNBOUNDED_US

    def rewind(self, plan: RecomputePlan) -> ReuseState:
        """The state to recompute from `plan.reload_from_ts_us`: no window entries
        (the reload rebuilds them), only the sessions last seen before that time."""
        if plan.reload_from_ts_us is None:
            sessions = self.sessions.clear()
        else:
            sessions = self.sessions.filter(pl.col("ts_us") < plan.reload_from_ts_us)
        return ReuseState(self.window_us, None, self.entries.clear(), sessions)

    def with_late_sessions(self, late: pl.DataFrame) -> ReuseState:
        """The state once the late records `late` (at or before the watermark) are
        taken: each session's remembered request becomes its latest in (ts, id)
        order, which may be a late one. Entries and watermark stay: a caller uses
        this for late records over W before the watermark, which no entry holds."""
        rows = late.filter(pl.col("session_id").is_not_null())
        if rows.height == 0:
            return self
        rows = rows.select([pl.col(c).cast(t) for c, t in SESSION_SCHEMA.items()])
        latest = (
            pl.concat([self.sessions, rows])
            .sort("ts_us", "id")
            .unique("session_id", keep="last", maintain_order=True)
        )
        return ReuseState(self.window_us, self.watermark, self.entries, latest)

    def to_bytes(self) -> bytes:
        """A self-describing blob (header + two Arrow IPC streams) for the database."""
        meta = json.dumps(
            {"window_us": self.window_us, "watermark": self.watermark}, separators=(",", ":")
        ).encode()
        parts = [_MAGIC, struct.pack("<I", len(meta)), meta]
        for frame in (self.entries, self.sessions):
            buf = io.BytesIO()
            frame.write_ipc(buf, compression="zstd")
            data = buf.getvalue()
            parts += [struct.pack("<Q", len(data)), data]
        return b"".join(parts)

    @classmethod
    def from_bytes(cls, blob: bytes) -> ReuseState:
        if not blob.startswith(_MAGIC):
            raise ValueError("not a serialized ReuseState")
        pos = len(_MAGIC)
        (meta_len,) = struct.unpack_from("<I", blob, pos)
        pos += 4
        meta = json.loads(blob[pos : pos + meta_len])
        pos += meta_len
        frames: list[pl.DataFrame] = []
        for schema in (ENTRY_SCHEMA, SESSION_SCHEMA):
            (size,) = struct.unpack_from("<Q", blob, pos)
            pos += 8
            frame = pl.read_ipc(io.BytesIO(blob[pos : pos + size]))
            frames.append(
                frame.select(
                    [
                        (pl.col(c) if c in frame.columns else pl.lit(None)).cast(t).alias(c)
                        for c, t in schema.items()
                    ]
                )
            )
            pos += size
        watermark = meta["watermark"]
        return cls(
            window_us=int(meta["window_us"]),
            watermark=None if watermark is None else (int(watermark[0]), int(watermark[1])),
            entries=frames[0],
            sessions=frames[1],
        )


def late_mask(state: ReuseState, ts_us: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Which (ts_us, id) sort at or before the state's watermark."""
    if state.watermark is None:
        return np.zeros(len(ts_us), dtype=np.bool_)
    wts, wid = state.watermark
    return np.asarray((ts_us < wts) | ((ts_us == wts) & (ids <= wid)))


def earliest_late(state: ReuseState | None, frame: pl.DataFrame) -> int | None:
    """The ts_us of the earliest record of `frame` at or before the state's
    watermark; None when there is none (no state, nothing processed yet, or every
    record sorts after the watermark), i.e. when the forward pass can take it.

    A caller that rebuilds whole buckets rounds this down to a bucket start before
    `plan_from` (the analytics pass rebuilds whole hours of rollups)."""
    if state is None or state.watermark is None or frame.height == 0:
        return None
    ts = frame["ts_us"].to_numpy()
    late = late_mask(state, ts, frame["id"].to_numpy())
    return int(ts[late].min()) if late.any() else None


def plan_recompute(state: ReuseState | None, frame: pl.DataFrame) -> RecomputePlan | None:
    """None when `frame` can go through the forward pass; else what to reload.

    The reload starts W before the earliest late record: see the module docstring
    for the procedure and why it is exact."""
    earliest = earliest_late(state, frame)
    if earliest is None:
        return None
    assert state is not None  # a late record needs a watermark
    return plan_from(state, earliest)


def plan_from(state: ReuseState, from_ts_us: int) -> RecomputePlan:
    """The plan to recompute every result from `from_ts_us` on, which must be at
    or before the earliest late record (a caller rebuilding whole buckets rounds
    it down to a bucket start). Reload starts W earlier; the seeds are the
    sessions whose remembered request is not before the reload start."""
    if state.unbounded:
        return RecomputePlan(from_ts_us, None, ())
    reload_from = from_ts_us - state.window_us
    dropped = state.sessions.filter(pl.col("ts_us") >= reload_from)["session_id"]
    return RecomputePlan(from_ts_us, reload_from, tuple(sorted(dropped.to_list())))


def late_spans(
    late_ts: list[int], successor_ts: list[int], window_us: int, bucket_us: int
) -> list[tuple[int, int]]:
    """The bucket-aligned spans [start, end) whose results late records at
    `late_ts` can change (module docstring): each from its bucket to the bucket
    after t + W, plus the bucket of each session successor in `successor_ts`;
    sorted, overlapping or touching spans merged."""
    spans = [
        ((t // bucket_us) * bucket_us, ((t + window_us) // bucket_us + 1) * bucket_us)
        for t in late_ts
    ]
    spans += [
        ((t // bucket_us) * bucket_us, (t // bucket_us + 1) * bucket_us) for t in successor_ts
    ]
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged
