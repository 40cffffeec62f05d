"""history_rewrite and session openings (contract sections 4 and 5), vectorized.

A request's session predecessor is the previous request with the same
`session_id` in (ts, id) order, across models, however long ago: the state keeps
each session's latest request (its blocks, prompt_tokens and block_size) so a
later batch can still compare with it.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from service.analytics._arrays import (
    I64,
    Bools,
    codes,
    ints,
    leading_true,
    offsets_of,
    unpack_blobs,
)
from service.analytics.state import SESSION_SCHEMA, ReuseState

# Bound on the hash comparisons materialized at once.
_COMPARE_CHUNK = 4_000_000


def rewrite_need(prev_prompt: I64, prev_block_size: I64) -> I64:
    """How many leading blocks a request must share with its session's previous
    request not to be a rewrite: k = ceil(0.9 * full), `full` the previous
    request's full blocks (prompt_tokens // block_size; 0 without a block size)."""
    full = np.where(prev_block_size > 0, prev_prompt // np.maximum(prev_block_size, 1), 0)
    return (9 * full + 9) // 10


def session_history(
    req: pl.DataFrame,
    ts: I64,
    ids: I64,
    flat: I64,
    counts: I64,
    state: ReuseState,
) -> tuple[Bools, Bools, I64, Bools, pl.DataFrame]:
    """history_rewrite, is_opening, the blocks shared with the session's previous
    request and whether that request had another model, per request, and the
    sessions' latest requests.

    Rewrite: the leading blocks in common with the previous request of the session
    cover less than 90% of that request's full blocks, i.e. common < k with
    k = ceil(0.9 * full); only the first k blocks need comparing. `shared`: that
    count, min(common, k), where both requests have blocks; -1 elsewhere (a
    rewrite's first differing block is its block `shared`)."""
    n = req.height
    rewrite = np.zeros(n, dtype=np.bool_)
    shared = np.full(n, -1, dtype=np.int64)
    switched = np.zeros(n, dtype=np.bool_)
    # Only the sessions of this batch take part; the others are kept as they are.
    batch_sessions = req["session_id"].drop_nulls().unique().implode()
    active = state.sessions["session_id"].is_in(batch_sessions).fill_null(False)
    old, idle = state.sessions.filter(active), state.sessions.filter(~active)
    sess_state, sess_req = codes(old["session_id"], req["session_id"])
    in_session = np.flatnonzero(sess_req >= 0)
    old_flat, old_counts = unpack_blobs(old["block_hashes"])
    n_old = old.height
    # Items: the remembered sessions' latest requests, then the batch's session
    # requests; ordered by (session, ts, id) so each item's predecessor is its
    # session's previous request.
    item_sess = np.concatenate([sess_state, sess_req[in_session]])
    model_state, model_req = codes(old["model"], req["model"])
    item_model = np.concatenate([model_state, model_req[in_session]])
    item_ts = np.concatenate([old["ts_us"].to_numpy(), ts[in_session]]).astype(np.int64)
    item_id = np.concatenate([old["id"].to_numpy(), ids[in_session]]).astype(np.int64)
    item_prompt = np.concatenate(
        [ints(old["prompt_tokens"]), ints(req["prompt_tokens"])[in_session]]
    )
    item_bs = np.concatenate([ints(old["block_size"]), ints(req["block_size"])[in_session]])
    item_nb = np.concatenate([old_counts, counts[in_session]])
    # Offsets into one hash array: the batch's blocks, then the state's.
    item_off = np.concatenate([len(flat) + offsets_of(old_counts), offsets_of(counts)[in_session]])
    order = np.lexsort((item_id, item_ts, item_sess))
    same = np.zeros(len(order), dtype=np.bool_)
    same[1:] = item_sess[order[1:]] == item_sess[order[:-1]]
    cur = order[same]
    prev = order[np.flatnonzero(same) - 1]
    # Opening: no session, or no earlier request in it.
    opening = np.ones(n, dtype=np.bool_)
    followers = cur[cur >= n_old]
    opening[in_session[followers - n_old]] = False
    # A switch: the session's previous request was sent to another (known) model.
    leaders = prev[cur >= n_old]
    known = (item_model[followers] >= 0) & (item_model[leaders] >= 0)
    switched[in_session[followers - n_old]] = known & (item_model[followers] != item_model[leaders])
    # Only batch requests with blocks, after a previous request with blocks.
    judged = (cur >= n_old) & (item_nb[cur] > 0) & (item_nb[prev] > 0)
    cur, prev = cur[judged], prev[judged]
    need = rewrite_need(item_prompt[prev], item_bs[prev])
    m = np.minimum(np.minimum(need, item_nb[cur]), item_nb[prev])
    hashes = np.concatenate([flat, old_flat]) if n_old else flat
    common = np.zeros(len(cur), dtype=np.int64)
    start = 0
    while start < len(cur):
        # Chunks bound the index arrays to _COMPARE_CHUNK comparisons.
        cum = np.cumsum(m[start:])
        stop = start + max(1, int(np.searchsorted(cum, _COMPARE_CHUNK, side="right")))
        mm = m[start:stop]
        pos_in = np.arange(int(mm.sum()), dtype=np.int64) - np.repeat(offsets_of(mm), mm)
        a = np.repeat(item_off[cur[start:stop]], mm) + pos_in
        b = np.repeat(item_off[prev[start:stop]], mm) + pos_in
        common[start:stop] = leading_true(hashes[a] == hashes[b], offsets_of(mm), mm)
        start = stop
    rewrite[in_session[cur - n_old]] = common < need
    shared[in_session[cur - n_old]] = common

    # Each session's latest item becomes its remembered request.
    last = order[np.append(~same[1:], True)] if len(order) else order
    sess_rows = req.filter(pl.col("session_id").is_not_null()).select(list(SESSION_SCHEMA))
    items = pl.concat([old, sess_rows.cast(pl.Schema(SESSION_SCHEMA))])
    sessions = pl.concat([idle, items[np.sort(last)]])
    return rewrite, opening, shared, switched, sessions
