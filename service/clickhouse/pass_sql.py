"""The SQL of the ClickHouse analytics pass: the block-level work, run where the
block uses are. Python (service.clickhouse.analytics) then applies contract
section 4's per-request formulas, the same functions the relational pass uses, to
one row per request.

Why it needs no window functions, and shards by block hash: block hashes are
chained, so what a use needs is the previous use of its own (model, kind, key)
(the most recent earlier request that carried it: "each use refreshes the
window"). Grouping the uses of the pass's range, plus the W before it, by (model,
kind, key), sorting each group's (ts, id) pairs and pairing each use with the one
before gives every use's `seen` flag, the previous carrier's ts and TTFT. Every
group lives on one shard of `cityHash64(model, key)`, so the pass runs this step
shard by shard (`uses_sql(..., shard, shards)`), each shard's key groups alone;
the per-request step then only merges small per-use rows by request id.

A request's seen blocks are its leading run of seen blocks (`reuse_sql`: the
first unseen position, by an array per request), its deepest seen block the last
of that run. Because seen flags are prefix-closed for chained hashes, the run is
also the count of seen blocks, which makes the ceiling a plain sum over the
(model, key) groups; the array keeps the pass exact for keys that are not chained.

The rewarm causes need, for the deepest seen block only, the previous carrier's ts
and TTFT (above) and whether the rewarm's own replica carried that key within W
(`same_replica_sql`, a join of the few routing-or-eviction rewarms against the
uses of their keys). History rewrites need each session request's previous
request in the session, however old: `reuse_sql` groups the sessions of the range
and gives the leading blocks in common with that request.

Every statement reads `FINAL`: two stored copies of one request (a retry that
raced its first attempt) count once, the first received (docs/deployment.md).
Written for what ClickHouse 18.16 (Debian's package) and current releases share:
one JOIN per SELECT with USING, `ANY LEFT JOIN`, arrays and lambdas, no CTEs and
no window functions.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.analytics._arrays import UNBOUNDED_US

#: A replica stands in for "none given" in join keys: NUL, which no text field
#: may hold (service.usage_row).
NO_REPLICA = "\\0"


@dataclass(frozen=True)
class Scope:
    """Which records a pass computes and what it may look at.

    Computed: records with `ts_us >= from_us`, `id <= high_id` and, for a forward
    pass, `id > after_id`. Looked at: every record with `id <= high_id` from W
    before `from_us` (sessions: from any time)."""

    from_us: int
    high_id: int
    window_us: int
    after_id: int | None = None

    @property
    def lookback_us(self) -> int:
        if self.window_us >= UNBOUNDED_US:
            return -UNBOUNDED_US
        return self.from_us - self.window_us

    def computed(self) -> str:
        """The predicate of the computed records on usage_records."""
        where = f"ts_us >= {int(self.from_us)} AND id <= {int(self.high_id)}"
        if self.after_id is not None:
            where += f" AND id > {int(self.after_id)}"
        return where

    def uses(self) -> str:
        """The predicate of the uses looked at, on block_uses."""
        return f"ts_us >= {int(self.lookback_us)} AND id <= {int(self.high_id)}"


def uses_sql(scope: Scope, shard: int, shards: int) -> str:
    """Fill pass_uses with the uses of one shard of keys at or after `from_us`,
    each with its seen flag and previous carrier (module docstring)."""
    w = int(scope.window_us)
    return f"""
INSERT INTO pass_uses (id, kind, key, pos, seen, prev_ts, prev_ttft)
SELECT u_id, kind, key, pos, seen, p_ts, p_ttft
FROM (
    SELECT kind, key, u_id, u_positions,
           toUInt8(j > 1 AND u_ts - p_ts <= {w}) AS seen, p_ts, p_ttft, u_ts
    FROM (
        SELECT model, kind, key,
               arraySort(x -> (tupleElement(x, 2), tupleElement(x, 1)),
                         groupArray((id, ts, ttft, positions))) AS u
        FROM (
            SELECT model, kind, key, id, any(ts_us) AS ts,
                   ifNull(any(ttft_ms), nan) AS ttft, groupArray(pos) AS positions
            FROM block_uses FINAL
            WHERE {scope.uses()} AND cityHash64(model, key) % {int(shards)} = {int(shard)}
            GROUP BY model, kind, key, id
        )
        GROUP BY model, kind, key
    )
    ARRAY JOIN
        arrayEnumerate(u) AS j,
        arrayMap(x -> tupleElement(x, 1), u) AS u_id,
        arrayMap(x -> tupleElement(x, 2), u) AS u_ts,
        arrayMap(x -> tupleElement(x, 4), u) AS u_positions,
        arrayMap(i -> if(i > 1, tupleElement(u[i - 1], 2), 0), arrayEnumerate(u)) AS p_ts,
        arrayMap(i -> if(i > 1, tupleElement(u[i - 1], 3), nan), arrayEnumerate(u)) AS p_ttft
    WHERE u_ts >= {int(scope.from_us)}
)
ARRAY JOIN u_positions AS pos"""


#: The record columns a pass reads back, besides the block-level ones: what the
#: per-request formulas and every rollup (groups, segments, costs) read.
RECORD_COLUMNS = (
    "id",
    "ts_us",
    "service",
    "model",
    "prompt_tokens",
    "cached_tokens",
    "ttft_ms",
    "replica",
    "deploy",
    "session_id",
    "cache_key",
    "block_size",
    "prefix_key",
    "prefix_tokens",
    "cache_write_tokens",
    "cache_ttl_s",
    "provider",
    "scenario",
    "tenant",
    "segments",
)


def _blocks_per_request() -> str:
    """Per request: its leading run of seen blocks and its deepest seen block's
    previous carrier (ts, TTFT) and key."""
    return """
SELECT id, run, tupleElement(deep, 3) AS deep_prev_ts, tupleElement(deep, 4) AS deep_prev_ttft,
       tupleElement(deep, 5) AS deep_key
FROM (
    SELECT id, if(miss = 0, toInt64(length(b)), toInt64(miss) - 1) AS run,
           if(run > 0, b[run], (toUInt32(0), toUInt8(0), toInt64(0), nan, toInt64(0))) AS deep
    FROM (
        SELECT id, arraySort(x -> tupleElement(x, 1),
                             groupArray((pos, seen, prev_ts, prev_ttft, key))) AS b,
               arrayFirstIndex(x -> tupleElement(x, 2) = 0, b) AS miss
        FROM pass_uses WHERE kind = 0 GROUP BY id
    )
)"""


def _prefix_per_request() -> str:
    return """
SELECT id, seen AS p_seen, prev_ts AS p_prev_ts, prev_ttft AS p_prev_ttft
FROM pass_uses WHERE kind = 1"""


def _sessions(scope: Scope) -> str:
    """Per session request computed: whether it has a previous request in its
    session and, if so, that request's prompt_tokens, block size and block count
    and the leading blocks the two share (counted up to the shorter of the two)."""
    return f"""
SELECT s_id AS id, toUInt8(j > 1) AS s_has_prev,
       tupleElement(prev, 3) AS s_prev_prompt, tupleElement(prev, 4) AS s_prev_bs,
       toInt64(length(tupleElement(prev, 5))) AS s_prev_blocks,
       if(first_diff = 0, toInt64(m), toInt64(first_diff) - 1) AS s_common
FROM (
    SELECT j, s_id, s_ts, prev, m,
           arrayFirstIndex((a, b) -> a != b,
                           arraySlice(tupleElement(cur, 5), 1, m),
                           arraySlice(tupleElement(prev, 5), 1, m)) AS first_diff
    FROM (
        SELECT j, tupleElement(cur, 1) AS s_id, tupleElement(cur, 2) AS s_ts, cur,
               if(j > 1, s[j - 1], (toInt64(0), toInt64(0), toInt64(0), toInt64(0),
                                   emptyArrayInt64())) AS prev,
               least(length(tupleElement(cur, 5)), length(tupleElement(prev, 5))) AS m
        FROM (
            SELECT arraySort(x -> (tupleElement(x, 2), tupleElement(x, 1)),
                             groupArray((id, ts_us, prompt_tokens, ifNull(block_size, 0),
                                         block_hashes))) AS s
            FROM usage_records FINAL
            WHERE id <= {int(scope.high_id)} AND session_id IN (
                SELECT session_id FROM usage_records FINAL
                WHERE {scope.computed()} AND isNotNull(session_id))
            GROUP BY session_id
        )
        ARRAY JOIN arrayEnumerate(s) AS j, s AS cur
    )
    WHERE s_ts >= {int(scope.from_us)}
)"""


def reuse_sql(scope: Scope) -> str:
    """One row per computed record: RECORD_COLUMNS, `n_blocks` and `has_blocks`
    (the record gave block_hashes, maybe empty), the block-level values of
    `_blocks_per_request`, the prefix key's seen flag and carrier, and the session
    columns of `_sessions` (0 where they do not apply). Reads pass_uses."""
    cols = ", ".join(RECORD_COLUMNS)
    records = f"""
SELECT {cols}, toInt64(length(block_hashes)) AS n_blocks, has_blocks,
       if(length(block_hashes) > 0, block_hashes[1], toInt64(0)) AS first_block
FROM usage_records FINAL WHERE {scope.computed()}"""
    joined = records
    for n, part in enumerate((_blocks_per_request(), _prefix_per_request(), _sessions(scope))):
        joined = f"SELECT * FROM ({joined}) AS l{n} ANY LEFT JOIN ({part}) AS r{n} USING (id)"
    return joined


def same_replica_sql(scope: Scope) -> str:
    """The ids in pass_candidates whose own replica carried their key at most W
    before them (an earlier request by (ts, id))."""
    w = int(scope.window_us)
    return f"""
SELECT DISTINCT c_id AS id
FROM (
    SELECT id AS c_id, ts_us AS c_ts, model, kind, key, replica FROM pass_candidates
) AS c ALL INNER JOIN (
    SELECT model, kind, key, ifNull(replica, '{NO_REPLICA}') AS replica,
           ts_us AS u_ts, id AS u_id
    FROM block_uses FINAL
    WHERE {scope.uses()} AND key IN (SELECT key FROM pass_candidates)
) AS u USING (model, kind, key, replica)
WHERE (u_ts < c_ts OR (u_ts = c_ts AND u_id < c_id)) AND c_ts - u_ts <= {w}"""
