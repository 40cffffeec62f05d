"""Per-request values of contract section 4, vectorized.

`compute_request_metrics` gives, for every request, the values the rollups sum:
`cacheable_tokens`, `rewarm_tokens`, `is_rewarm` with its `rewarm_cause`,
`history_rewrite`, `is_hit`, plus `fingerprinted` and the first-block key for
`unique_prefix_ratio`.

How: every block occurrence becomes a row (request, key, position). A stable sort
by (model, kind, key) keeps time order within each key, so the previous row of a
key is the most recent earlier request that carried it ("each use refreshes the
window": only the most recent one matters). A block is *seen* when that previous
request started at most W before. The leading run of seen blocks per request is
then a search over each request's contiguous rows. Rewarm causes need one more
sort, only over the keys that some rewarm's deepest seen block has, by
(key, replica). No Python loop runs per block.

Caching profiles (contract section 4a) reach the pass as two per-request columns
the caller has already resolved from the record and its profile:
`min_prompt_tokens` (null or 0: no minimum) and `ttl_s` (the record's
`cache_ttl_s`, else the profile's TTL; null: none). They change the rewarm cause
only, never which requests are rewarms (cacheable tokens, seen blocks and W stay
as above), in the order of `CAUSES`: `below_minimum` (prompt_tokens < the
minimum: r alone decides), `concurrent`, `expiry` (the most recent earlier
carrier of the deepest seen block started more than TTL before r, compared in
microseconds as `gap_us > ttl_s * 1e6`), then `routing`, `eviction`, `unknown`.
The state (`service.analytics.state`) needs nothing new for them: expiry compares
r with that most recent carrier, whose ts the entries already hold for concurrency,
and a carrier older than W, which the state prunes, cannot be the deepest seen
block's (it would not be seen); below_minimum reads r's own columns.

Conventions where the contract is silent (all mirrored by the reference
implementation in tests/analytics/reference.py):

* a `prefix_hash` (`prefix_key`) is one block of `prefix_tokens` tokens (null: 0)
  in its own key space, never equal to a block hash. A request with both
  `block_hashes` and `prefix_key` is measured on its blocks; its `prefix_key`
  still counts as carried, so later prefix-only requests can see it;
* empty `block_hashes` count as none; a null `block_size` as 0 tokens a block;
* a block repeated within one request is not "seen" by its own earlier copy;
* `history_rewrite`: the previous request of the session is taken across models;
  when it has no `block_hashes` the request is not a rewrite (nothing to compare);
* non-fingerprinted requests get 0 cacheable and rewarm tokens, never a rewarm.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from service.analytics._arrays import (
    F64,
    I64,
    UNBOUNDED_US,
    Bools,
    Ints,
    Occurrences,
    codes,
    index_dtype,
    ints,
    leading_true,
    offsets_of,
    previous_occurrences,
    unpack_blobs,
    window_us,
    within,
)
from service.analytics.definitions import CAUSES, is_hit
from service.analytics.sessions import session_history
from service.analytics.state import (
    ENTRY_SCHEMA,
    LateRecordsError,
    ReuseState,
    late_mask,
    plan_recompute,
)

#: Rewarms below this many tokens are caching granularity, not a lost prefix.
REWARM_MIN_TOKENS = 128

#: Each cause as a small integer in the arrays (0: no rewarm), by its place in CAUSES.
_CODES = {name: i + 1 for i, name in enumerate(CAUSES)}
_BELOW_MINIMUM = _CODES["below_minimum"]
_CONCURRENT = _CODES["concurrent"]
_EXPIRY = _CODES["expiry"]
_ROUTING = _CODES["routing"]
_EVICTION = _CODES["eviction"]
_UNKNOWN = _CODES["unknown"]

INPUT_SCHEMA: dict[str, pl.DataType] = {
    "id": pl.Int64(),
    "ts_us": pl.Int64(),
    "model": pl.String(),
    "prompt_tokens": pl.Int64(),
    "cached_tokens": pl.Int64(),
    "ttft_ms": pl.Float64(),
    "replica": pl.String(),
    "session_id": pl.String(),
    "block_size": pl.Int64(),
    "block_hashes": pl.Binary(),
    "prefix_key": pl.Int64(),
    "prefix_tokens": pl.Int64(),
    # The record's caching profile, resolved by the caller (null: none; see above).
    "min_prompt_tokens": pl.Int64(),
    "ttl_s": pl.Float64(),
}

#: Columns of the per-request result, one row per request in (ts_us, id) order.
RESULT_SCHEMA: dict[str, pl.DataType] = {
    "id": pl.Int64(),
    "ts_us": pl.Int64(),
    "fingerprinted": pl.Boolean(),
    "seen_blocks": pl.Int64(),  # length of the leading run of seen blocks
    "cacheable_tokens": pl.Int64(),
    "rewarm_tokens": pl.Int64(),
    "is_rewarm": pl.Boolean(),
    "rewarm_cause": pl.String(),  # one of CAUSES, null when not a rewarm
    # A rewarm's gap to the most recent earlier carrier of its deepest seen block
    # (null when not a rewarm): the pause the expiry finding weighs against the TTL.
    "rewarm_gap_us": pl.Int64(),
    "history_rewrite": pl.Boolean(),
    # The leading blocks shared with the session's previous request, counted up to
    # the rewrite rule's k (`service.analytics.sessions`); null unless both have
    # blocks. A rewrite's first block that differs from that request's.
    "session_common_blocks": pl.Int64(),
    # The session's previous request was sent to another model.
    "session_model_changed": pl.Boolean(),
    # No session_id, or the first request of its session (contract section 5).
    "is_opening": pl.Boolean(),
    "is_hit": pl.Boolean(),
    "first_key": pl.Int64(),  # first block hash, or prefix_key; null if not fingerprinted
    "first_key_is_prefix": pl.Boolean(),
}


def _prepare(frame: pl.DataFrame) -> pl.DataFrame:
    """The columns the pass reads, typed, sorted by (ts_us, id)."""
    cols = [
        (pl.col(c) if c in frame.columns else pl.lit(None)).cast(t).alias(c)
        for c, t in INPUT_SCHEMA.items()
    ]
    out = frame.select(cols)
    if out.height > 1:
        ts = out["ts_us"].to_numpy()
        ids = out["id"].to_numpy()
        in_order = (ts[1:] > ts[:-1]) | ((ts[1:] == ts[:-1]) & (ids[1:] > ids[:-1]))
        if not in_order.all():
            out = out[np.lexsort((ids, ts))]
    return out


def compute_request_metrics(
    frame: pl.DataFrame, window_s: float, state: ReuseState | None = None
) -> tuple[pl.DataFrame, ReuseState]:
    """Per-request values of contract section 4 for `frame`, after `state`.

    `frame` holds records as stored (see INPUT_SCHEMA; missing optional columns
    count as null). The result has RESULT_SCHEMA, one row per request in
    (ts_us, id) order. The new state continues the pass: feeding consecutive
    batches gives the same results as one pass over all of them. A batch with
    records at or before the state's watermark raises `LateRecordsError`; see
    `service.analytics.state` for the recompute path.
    """
    w_us = window_us(window_s)
    if state is None:
        state = ReuseState.empty(w_us)
    elif state.window_us != w_us:
        raise ValueError(f"state was built for W={state.window_us} us, not {w_us} us")
    req = _prepare(frame)
    n = req.height
    if n == 0:
        return pl.DataFrame(schema=RESULT_SCHEMA), state
    ts = req["ts_us"].to_numpy().astype(np.int64, copy=False)
    ids = req["id"].to_numpy().astype(np.int64, copy=False)
    if late_mask(state, ts, ids).any():
        plan = plan_recompute(state, req)
        assert plan is not None
        raise LateRecordsError(plan)

    reuse = _reuse(req, ts, ids, state, w_us)
    rewrite, opening, shared, switched, sessions = session_history(
        req, ts, ids, reuse.flat, reuse.counts, state
    )

    has_blocks = reuse.counts > 0
    first_block = (
        reuse.flat[np.minimum(offsets_of(reuse.counts), max(len(reuse.flat) - 1, 0))]
        if len(reuse.flat)
        else np.zeros(n, dtype=np.int64)
    )
    results = results_frame(
        req,
        ids=ids,
        ts=ts,
        has_blocks=has_blocks,
        first_block=first_block,
        seen_blocks=reuse.seen_blocks,
        cacheable=reuse.cacheable,
        rewarm_tokens=reuse.rewarm_tokens,
        cause=reuse.cause,
        gap_us=reuse.gap_us,
        rewrite=rewrite,
        opening=opening,
        shared=shared,
        switched=switched,
    )
    new_state = ReuseState(
        window_us=w_us,
        watermark=(int(ts[-1]), int(ids[-1])),
        entries=reuse.entries,
        sessions=sessions,
    )
    return results, new_state


def results_frame(
    req: pl.DataFrame,
    *,
    ids: I64,
    ts: I64,
    has_blocks: Bools,
    first_block: I64,
    seen_blocks: I64,
    cacheable: I64,
    rewarm_tokens: I64,
    cause: np.ndarray,
    gap_us: I64,
    rewrite: Bools,
    opening: Bools,
    shared: I64,
    switched: Bools,
) -> pl.DataFrame:
    """The RESULT_SCHEMA frame from the per-request arrays (request order of `req`,
    whose prompt_tokens, cached_tokens and prefix_key it reads). `cause` holds the
    codes of `cause_codes` (0: no rewarm); `first_block` the first block hash of the
    requests with blocks (anything elsewhere). Shared by this pass and the ClickHouse
    one (service.clickhouse.analytics), so both build the same columns the same way."""
    prompt = ints(req["prompt_tokens"])
    cached = ints(req["cached_tokens"])
    has_prefix = req["prefix_key"].is_not_null().to_numpy()
    fingerprinted = has_blocks | has_prefix
    first_key = np.where(has_blocks, first_block, ints(req["prefix_key"]))
    names = pl.Series("rewarm_cause", cause).replace_strict(
        {code: name for name, code in cause_codes().items()}, default=None, return_dtype=pl.String
    )
    return pl.DataFrame(
        {
            "id": ids,
            "ts_us": ts,
            "fingerprinted": fingerprinted,
            "seen_blocks": seen_blocks,
            "cacheable_tokens": cacheable,
            "rewarm_tokens": rewarm_tokens,
            "is_rewarm": cause > 0,
            "rewarm_cause": names,
            "rewarm_gap_us": gap_us,
            "history_rewrite": rewrite,
            "session_common_blocks": shared,
            "session_model_changed": switched,
            "is_opening": opening,
            "is_hit": is_hit(cached, prompt),
            "first_key": first_key,
            "first_key_is_prefix": ~has_blocks & has_prefix,
        },
        schema_overrides={"seen_blocks": pl.Int64(), "rewarm_gap_us": pl.Int64()},
    ).with_columns(
        *[
            pl.when(pl.col("fingerprinted")).then(pl.col(c)).otherwise(None).alias(c)
            for c in ("first_key", "first_key_is_prefix")
        ],
        pl.when(pl.col("is_rewarm")).then(pl.col("rewarm_gap_us")).otherwise(None),
        pl.when(pl.col("session_common_blocks") >= 0).then(pl.col("session_common_blocks")),
    )


def cause_codes() -> dict[str, int]:
    """Each cause's code in the arrays (0: no rewarm), by its place in CAUSES."""
    return dict(_CODES)


class _Reuse:
    """Outputs of the window part of the pass (arrays in request order)."""

    def __init__(self) -> None:
        self.flat: I64 = np.zeros(0, dtype=np.int64)
        self.counts: I64 = np.zeros(0, dtype=np.int64)
        self.seen_blocks: I64 = np.zeros(0, dtype=np.int64)
        self.cacheable: I64 = np.zeros(0, dtype=np.int64)
        self.rewarm_tokens: I64 = np.zeros(0, dtype=np.int64)
        self.cause: np.ndarray = np.zeros(0, dtype=np.int8)
        self.gap_us: I64 = np.zeros(0, dtype=np.int64)  # 0 where not a rewarm
        self.entries: pl.DataFrame = pl.DataFrame(schema=ENTRY_SCHEMA)


def _reuse(req: pl.DataFrame, ts: I64, ids: I64, state: ReuseState, w_us: int) -> _Reuse:
    """Seen blocks, cacheable and rewarm tokens, rewarm causes, the new entries.

    The steps, each its own function: lay out one row per key occurrence
    (`_occurrence_rows`), find each row's previous carrier (one stable sort), take
    the leading run of seen blocks per request (`_seen_runs`), turn runs into tokens
    (`_reuse_tokens`), judge each rewarm's cause (`_rewarm_causes`), and keep what
    the next batch needs (`_next_entries`)."""
    out = _Reuse()
    rows = _occurrence_rows(req, ts, state)
    out.flat, out.counts = rows.block_keys, rows.counts
    occ = previous_occurrences(rows.keys, rows.groups, rows.source)
    run = _seen_runs(rows, occ, w_us)
    cacheable, rewarm_tokens, is_rewarm = _reuse_tokens(req, rows, run)
    out.seen_blocks, out.cacheable, out.rewarm_tokens = run, cacheable, rewarm_tokens
    rw = np.flatnonzero(is_rewarm)
    out.cause, out.gap_us = _rewarm_causes(rows, occ, ts, run, rw, profile_of(req, rw), w_us)
    del occ  # the largest arrays of the pass: gone before the entries are grouped
    out.entries = _next_entries(req, rows, ids, w_us)
    return out


@dataclass(frozen=True)
class _Rows:
    """The pass's flat layout: one row per key occurrence, in three runs.

    Rows: the remembered entries this batch may meet (one row each), then the
    batch's block hashes (request after request), then its prefix keys. Sources
    (what a row points at, in time order): those entries (time-sorted, all before
    this batch), then the batch's requests. The entries the batch cannot meet
    (`idle`) only need pruning and stay out of the rows."""

    keys: I64
    #: (model, kind) per row: block hashes and prefix keys never match each other.
    groups: Ints
    source: Ints
    src_ts: I64
    src_ttft: F64  # NaN where the ttft is null
    src_rep: Ints  # dense replica code per source, -1 when none was given
    counts: I64  # blocks per request
    prefix_req: I64  # the requests that carry a prefix_key, ascending
    entries: pl.DataFrame  # the met entries, the first `n_state` sources
    idle: pl.DataFrame

    @property
    def n_state(self) -> int:
        return self.entries.height

    @property
    def n_requests(self) -> int:
        return len(self.counts)

    @property
    def n_blocks(self) -> int:
        return len(self.keys) - self.n_state - len(self.prefix_req)

    @property
    def block_keys(self) -> I64:
        """The batch's block hashes, request after request (a view of `keys`)."""
        return self.keys[self.n_state : self.n_state + self.n_blocks]

    @property
    def rep_req(self) -> Ints:
        return self.src_rep[self.n_state :]

    def block_offsets(self) -> I64:
        """Where each request's blocks start among the batch's block rows."""
        return offsets_of(self.counts)

    def prefix_rows(self) -> I64:
        """Per request, the row of its prefix key (-1: none)."""
        row = np.full(self.n_requests, -1, dtype=np.int64)
        first = self.n_state + self.n_blocks
        row[self.prefix_req] = first + np.arange(len(self.prefix_req))
        return row


def _occurrence_rows(req: pl.DataFrame, ts: I64, state: ReuseState) -> _Rows:
    """The rows and sources of the batch after `state` (see `_Rows`). Models and
    replicas get codes shared by the entries and the batch."""
    n = req.height
    flat, counts = unpack_blobs(req["block_hashes"])
    prefix_req = np.flatnonzero(req["prefix_key"].is_not_null().to_numpy())
    prefix_keys = req["prefix_key"].fill_null(0).to_numpy()[prefix_req]
    entries, idle = _split_entries(state.entries, flat, prefix_keys)
    n_state = entries.height
    model_state, model_req = codes(entries["model"], req["model"])
    rep_state, rep_req = codes(entries["replica"], req["replica"])
    src_ttft = np.concatenate(
        [
            entries["ttft_ms"].fill_null(np.nan).to_numpy(),
            req["ttft_ms"].fill_null(np.nan).to_numpy(),
        ]
    ).astype(np.float64)
    keys = np.concatenate([entries["key"].to_numpy(), flat, prefix_keys]).astype(np.int64)
    del flat  # `keys` holds the blocks; the joined blobs can go
    idx = index_dtype(n_state + n)
    source = np.concatenate(
        [
            np.arange(n_state, dtype=idx),
            np.repeat(np.arange(n_state, n_state + n, dtype=idx), counts),
            (n_state + prefix_req).astype(idx),
        ]
    )
    groups = np.concatenate(
        [
            model_state * 2 + entries["kind"].to_numpy().astype(np.int32),
            np.repeat(model_req * 2, counts),
            model_req[prefix_req] * 2 + 1,
        ]
    ).astype(np.int32)
    return _Rows(
        keys=keys,
        groups=groups,
        source=source,
        src_ts=np.concatenate([entries["ts_us"].to_numpy(), ts]).astype(np.int64),
        src_ttft=src_ttft,
        src_rep=np.concatenate([rep_state, rep_req]),
        counts=counts,
        prefix_req=prefix_req,
        entries=entries,
        idle=idle,
    )


def _seen_runs(rows: _Rows, occ: Occurrences, w_us: int) -> I64:
    """Per request, the length of the leading run of seen blocks: a row is seen
    when its previous carrier started at most W before. Taken over the contiguous
    block rows of each request; a prefix-only request's run is its prefix key's
    (0 or 1)."""
    seen = np.empty(len(rows.keys), dtype=np.bool_)
    seen[occ.perm] = within(rows.src_ts, occ.source, occ.prev_source, w_us)
    counts = rows.counts
    has_blocks = counts > 0
    run = np.zeros(rows.n_requests, dtype=np.int64)
    seen_blocks = seen[rows.n_state : rows.n_state + rows.n_blocks]
    run[has_blocks] = leading_true(
        seen_blocks, rows.block_offsets()[has_blocks], counts[has_blocks]
    )
    prefix_row = rows.prefix_rows()
    prefix_only = (prefix_row >= 0) & ~has_blocks
    run[prefix_only] = seen[prefix_row[prefix_only]]
    return run


def _reuse_tokens(req: pl.DataFrame, rows: _Rows, run: I64) -> tuple[I64, I64, Bools]:
    return reuse_tokens(req, rows.counts, rows.prefix_rows() >= 0, run)


def reuse_tokens(
    req: pl.DataFrame, counts: I64, has_prefix: Bools, run: I64
) -> tuple[I64, I64, Bools]:
    """Cacheable tokens, rewarm tokens and whether each request is a rewarm, from
    its run of seen blocks (or its seen prefix key): contract section 4. `counts`:
    blocks per request; `req` gives prompt_tokens, cached_tokens, block_size and
    prefix_tokens."""
    prompt = ints(req["prompt_tokens"])
    cached = ints(req["cached_tokens"])
    has_blocks = counts > 0
    prefix_only = has_prefix & ~has_blocks
    cacheable = np.where(
        has_blocks,
        np.minimum(prompt, run * ints(req["block_size"])),
        np.where(prefix_only, np.minimum(prompt, run * ints(req["prefix_tokens"])), 0),
    )
    fingerprinted = has_blocks | has_prefix
    rewarm_tokens = np.where(fingerprinted, np.maximum(0, cacheable - cached), 0)
    # rewarm_tokens >= max(128, cacheable / 10), in integers.
    is_rewarm = (
        fingerprinted & (rewarm_tokens >= REWARM_MIN_TOKENS) & (10 * rewarm_tokens >= cacheable)
    )
    return cacheable, rewarm_tokens, is_rewarm


@dataclass(frozen=True)
class Profile:
    """The caching profile's say on each rewarm (arrays in the order of `rw`)."""

    below_minimum: Bools  # prompt_tokens < min_prompt_tokens (null or 0: never)
    ttl_us: F64  # ttl_s * 1e6, NaN where there is no TTL


def profile_of(req: pl.DataFrame, rw: I64) -> Profile:
    """The profile columns of the rewarms `rw` only (a gather, not a full column)."""
    at = pl.Series(rw)
    prompt = ints(req["prompt_tokens"].gather(at))
    minimum = ints(req["min_prompt_tokens"].gather(at))
    ttl_s = req["ttl_s"].gather(at).fill_null(np.nan).to_numpy().astype(np.float64)
    return Profile(below_minimum=prompt < minimum, ttl_us=ttl_s * 1e6)


def _rewarm_causes(
    rows: _Rows, occ: Occurrences, ts: I64, run: I64, rw: I64, profile: Profile, w_us: int
) -> tuple[np.ndarray, I64]:
    """The cause code of each request (0 where `rw`, the rewarms, does not list
    it) and its gap to that carrier (0 likewise): the first cause that holds in the
    order of CAUSES, judged at its deepest seen block against the most recent
    earlier carrier: a prompt under the profile's
    minimum (below_minimum); that carrier still in prefill (concurrent); it started
    more than the TTL before (expiry: an integer gap against ttl_s * 1e6, as the
    reference compares); else no replica given (unknown); else whether the
    rewarm's own replica carried it within W (eviction) or not (routing)."""
    cause = np.zeros(rows.n_requests, dtype=np.int8)
    gaps = np.zeros(rows.n_requests, dtype=np.int64)
    deep = _deepest_seen_rows(rows, run, rw)
    last = _previous_sources(occ, deep)
    gap = ts[rw] - rows.src_ts[last]
    gaps[rw] = gap
    first = first_causes(profile, gap, rows.src_ttft[last], rows.rep_req[rw] >= 0)
    cause[rw] = first
    ask = first == 0
    if ask.any():
        on_replica = _same_replica_within(occ, deep[ask], rows.src_ts, rows.src_rep, w_us)
        cause[rw[ask]] = replica_causes(on_replica)
    return cause, gaps


def first_causes(profile: Profile, gap: I64, prev_ttft_ms: F64, has_replica: Bools) -> np.ndarray:
    """The cause code of each rewarm that its own columns and its deepest seen
    block's most recent earlier carrier decide, in the order of CAUSES; 0 where
    only the replicas can tell (`replica_causes`). `gap`: microseconds since that
    carrier started; `prev_ttft_ms`: its TTFT (NaN: none)."""
    cause = np.zeros(len(gap), dtype=np.int8)
    below = profile.below_minimum
    # The most recent earlier carrier was still in prefill (null ttft: NaN, False).
    concurrent = ~below & (gap < prev_ttft_ms * 1000.0)
    # ... or started more than the TTL before r (no TTL: NaN, False).
    expired = ~below & ~concurrent & (gap > profile.ttl_us)
    no_replica = ~(below | concurrent | expired) & ~has_replica
    cause[no_replica] = _UNKNOWN
    cause[expired] = _EXPIRY
    cause[concurrent] = _CONCURRENT
    cause[below] = _BELOW_MINIMUM
    return cause


def replica_causes(on_replica: Bools) -> np.ndarray:
    """Eviction where the rewarm's own replica carried its deepest seen block
    within W, else routing."""
    return np.where(on_replica, _EVICTION, _ROUTING).astype(np.int8)


def _deepest_seen_rows(rows: _Rows, run: I64, rw: I64) -> I64:
    """The row of each rewarm's deepest seen block: the last of its leading run
    (a rewarm has cacheable >= 128 > 0, so the run is not empty), or its prefix
    key's row when it has no blocks."""
    has_blocks = rows.counts[rw] > 0
    block_row = rows.n_state + rows.block_offsets()[rw] + run[rw] - 1
    return np.where(has_blocks, block_row, rows.prefix_rows()[rw]).astype(np.int64)


def _previous_sources(occ: Occurrences, at: I64) -> Ints:
    """The previous carrier's source of each row in `at` (rows in input order)."""
    prev_row = np.empty(len(occ.perm), dtype=occ.prev_source.dtype)
    prev_row[occ.perm] = occ.prev_source
    return prev_row[at]


def _next_entries(req: pl.DataFrame, rows: _Rows, ids: I64, w_us: int) -> pl.DataFrame:
    """The state's entries after this batch: the latest occurrence per (model,
    kind, key, replica) among the met entries and the batch, plus the idle entries,
    both pruned of what is over W older than the newest request."""
    fresh = _new_entries(
        req, rows.entries, rows.keys, rows.groups, rows.source, rows.src_ts, rows.src_rep, ids, w_us
    )
    if rows.idle.height == 0:
        return fresh
    idle = rows.idle
    if w_us < UNBOUNDED_US:
        idle = idle.filter(pl.col("ts_us") >= int(rows.src_ts[-1]) - w_us)
    return pl.concat([idle, fresh])


def _split_entries(
    entries: pl.DataFrame, block_keys: I64, prefix_keys: I64
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The entries this batch may meet (their key is in the batch: any model, a
    superset is harmless), sorted by (ts_us, id); and the idle rest, which only
    needs pruning. Keeps a small batch's cost independent of the state's size."""
    if entries.height == 0:
        return entries, entries
    kind = entries["kind"].to_numpy()
    key = entries["key"].to_numpy()
    active = ((kind == 0) & np.isin(key, block_keys)) | ((kind == 1) & np.isin(key, prefix_keys))
    mask = pl.Series(active)
    touched = entries.filter(mask)
    if touched.height:
        touched = touched[np.lexsort((touched["id"].to_numpy(), touched["ts_us"].to_numpy()))]
    return touched, entries.filter(~mask)


def _same_replica_within(
    occ: Occurrences, rows: I64, src_ts: I64, src_rep: Ints, w_us: int
) -> Bools:
    """For each row, whether an earlier source on the row's replica carried the
    row's key at most W before the row's source.

    Only the keys asked about are re-sorted, by (key, replica), keeping time order."""
    n_rows = len(occ.perm)
    gid = occ.group_ids()
    is_query = np.zeros(n_rows, dtype=np.bool_)
    is_query[rows] = True
    q_pos = np.flatnonzero(is_query[occ.perm])  # sorted positions of the asked rows
    del is_query
    q_row = occ.perm[q_pos]
    wanted = np.zeros(int(gid[-1]) + 1, dtype=np.bool_)
    wanted[gid[q_pos]] = True
    cand = np.flatnonzero(wanted[gid])
    cand_src = occ.source[cand]
    n_rep = int(src_rep.max()) + 2
    key2 = gid[cand].astype(np.int64) * n_rep + (src_rep[cand_src] + 1)
    del gid
    occ2 = previous_occurrences(key2, None, cand_src)
    inv2 = np.empty(len(cand), dtype=np.int64)
    inv2[occ2.perm] = np.arange(len(cand))
    prev = occ2.prev_source[inv2[np.searchsorted(cand, q_pos)]]
    ok = within(src_ts, occ.source[q_pos], prev, w_us)
    # Back to the caller's order of `rows`.
    result = np.empty(len(rows), dtype=np.bool_)
    result[np.argsort(rows)] = ok[np.argsort(q_row)]
    return result


def _new_entries(
    req: pl.DataFrame,
    entries: pl.DataFrame,
    keys: I64,
    groups: Ints,
    source: Ints,
    src_ts: I64,
    src_rep: Ints,
    ids: I64,
    w_us: int,
) -> pl.DataFrame:
    """Latest occurrence per (model, kind, key, replica), pruned of the ones over
    W older than the newest request: they can never be seen again."""
    # Sources are in time order, so the ones within W are a suffix.
    first_kept = 0
    if w_us < UNBOUNDED_US:
        first_kept = int(np.searchsorted(src_ts, int(src_ts[-1]) - w_us))
    keep = source >= first_kept
    kept_src = source[keep]
    rows = pl.DataFrame(
        {"g": groups[keep], "key": keys[keep], "rep": src_rep[kept_src], "src": kept_src}
    )
    latest = rows.group_by(["g", "key", "rep"]).agg(pl.col("src").max()).sort("src")
    src = latest["src"].to_numpy()
    models = pl.concat([entries["model"], req["model"]])
    replicas = pl.concat([entries["replica"], req["replica"]])
    all_ids = np.concatenate([entries["id"].to_numpy(), ids]).astype(np.int64)
    ttft = pl.concat([entries["ttft_ms"], req["ttft_ms"]])
    at = pl.Series(src)
    return pl.DataFrame(
        {
            "model": models.gather(at),
            "kind": (latest["g"] % 2).cast(pl.Int8),
            "key": latest["key"],
            "replica": replicas.gather(at),
            "ts_us": src_ts[src],
            "id": all_ids[src],
            "ttft_ms": ttft.gather(at),
        },
        schema=ENTRY_SCHEMA,
    )
