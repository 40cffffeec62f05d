"""The SQL of the ClickHouse analytics pass: the block-level work, run where the
records are, on their block arrays (`uses_of`: nothing is written to read them).
Python (service.clickhouse.analytics) then applies contract section 4's
per-request formulas, the same functions the relational pass uses, to one row per
request.

Why it needs no window functions, and shards by block hash: block hashes are
chained, so what a use needs is the previous use of its own (model, kind, key)
(the most recent earlier request that carried it: "each use refreshes the
window"). Grouping the uses of the pass's range by (model, kind, key), with the
latest use of the W before the range (an `argMax`, not the W's every use: a hot
system-prompt block has millions), sorting each group's (ts, id) pairs and pairing
each use with the one before gives every use's `seen` flag and the previous
carrier's ts and TTFT. Every group lives in one slice of `cityHash64(model, key)`,
so the pass may run this step slice by slice (`uses_sql(..., shard, shards)`,
`CACHEWATCH_CLICKHOUSE_PASS_SHARDS`), each slice's key groups alone in memory;
the per-request step then only merges small per-use rows by request id. The
pairing shifts arrays (`_previous`) rather than indexing them in a lambda, which
would copy the array into every element.

A request's seen blocks are its leading run of seen blocks (`blocks_sql`: the
first unseen position), its deepest seen block the last of that run. Because seen
flags are prefix-closed for chained hashes, that is the last seen position, found
by plain aggregates; for keys that are not chained, `blocks_exact_sql` keeps the
pass exact with an array per request, the slower way.

The rewarm causes need, for the deepest seen block only, the previous carrier's ts
and TTFT (above) and whether the rewarm's own replica carried that key within W
(`same_replica_sql`, a join of the few routing-or-eviction rewarms against the
uses of their keys). History rewrites need each session request's previous
request in the session, however old: `reuse_sql` reads the range's sessions from
`session_requests` (sorted by session, so each session's latest request before the
range is a primary-key read) and gives the leading blocks in common with it.

No statement reads `FINAL` (on 18.16 it merges the parts in one stream, the
slowest read there is): a request is stored once (the insert checks and writes
under one lock, service.clickhouse.records), and the session rows derived from it
may be there twice (a pass that died after deriving them, service.clickhouse.derive),
which `_sessions` tolerates by taking one per (session, request); the rest are
maxima or distinct values.

On a cluster (docs/deployment.md, "Sharding") every table read here but the
pass's scratch (pass_uses, pass_candidates: Memory, on the server the pass talks
to, the initiator) is Distributed. A SELECT whose FROM is one runs on every shard,
its partial aggregates merged on the initiator; the rest of a statement (outer
SELECTs, joins, the scratch) runs on the initiator. So every `IN (SELECT ...)` is
`GLOBAL IN` and every join `GLOBAL ANY LEFT JOIN`: the initiator computes the
subquery once and ships its rows with the query. A plain IN in a shard's query is
refused when it reads a Distributed table (18.16: "Double-distributed IN/JOIN
subqueries is denied", the sessions' subquery) and is otherwise run by each shard
on its own tables: pass_candidates, filled on the initiator only, is missing or
empty there (issue 33: 622 evictions instead of 1,660). A condition over a
subquery, not a table, runs on the initiator anyway; GLOBAL keeps it right on a
server that pushes it down into the shards' reads, and on one server GLOBAL is the
plain form. The rest holds unchanged: argMax, any, groupArray and counts merge
exactly; `LIMIT 1 BY` and `DISTINCT` over a Distributed table run on each shard
and again on the initiator (18.16 checked), and the copies they fold are on one
shard anyway (a session's rows by the sharding key). The pass's own shards
(`uses_sql`) are not the cluster's: each of its statements reads every server.

Written for what ClickHouse 18.16 (Debian's package) and current releases share:
one JOIN per SELECT with USING, `ANY LEFT JOIN`, arrays and lambdas, no CTEs and
no window functions.
"""

from __future__ import annotations

from dataclasses import dataclass

from service.analytics._arrays import UNBOUNDED_US


@dataclass(frozen=True)
class Scope:
    """Which records a pass computes and what it may look at.

    Computed: records with `ts_us >= from_us` (and `< to_us`, for a step of a
    pass), `id <= high_id` and, for a forward pass, `id > after_id`. Looked at:
    every record with `id <= high_id` from W before `from_us` (sessions: from any
    time)."""

    from_us: int
    high_id: int
    window_us: int
    after_id: int | None = None
    to_us: int | None = None

    @property
    def lookback_us(self) -> int:
        """The oldest ts whose uses can be seen from `from_us` on."""
        if self.window_us >= UNBOUNDED_US:
            return -UNBOUNDED_US
        return self.from_us - self.window_us

    def computed(self) -> str:
        """The predicate of the computed records on usage_records."""
        where = self.in_range()
        if self.after_id is not None:
            where += f" AND id > {int(self.after_id)}"
        return where

    def in_range(self) -> str:
        """The uses (or records) from `from_us` on: the computed ones and, in a
        forward pass, the few already computed at the watermark's ts."""
        where = f"ts_us >= {int(self.from_us)} AND id <= {int(self.high_id)}"
        if self.to_us is not None:
            where += f" AND ts_us < {int(self.to_us)}"
        return where

    def before_range(self) -> str:
        """The uses (or records) of the W before `from_us`: only the latest of each
        key (or session) matters."""
        return (
            f"ts_us >= {int(self.lookback_us)} AND ts_us < {int(self.from_us)} "
            f"AND id <= {int(self.high_id)}"
        )


def _previous(array: str, first: str) -> str:
    """Each element's predecessor in `array` (`first` for the first one): shifted
    by one, in linear time. An `arrayMap` reading `u[i - 1]` would copy the array
    into every element's lambda, quadratic in a hot key's uses."""
    return f"arrayPopBack(arrayPushFront({array}, {first}))"


def uses_of(where: str) -> str:
    """Every key the records matching `where` carry, one row per (record,
    position): their block hashes (kind 0) and prefix key (kind 1), read from the
    records' own arrays (the records are their only copy: nothing derived from
    them needs to survive a crash, and nothing is written to read them)."""
    columns = "model, kind, key, pos, ts_us, id, replica, ttft_ms"
    return f"""
    SELECT {columns} FROM (
        SELECT model, toUInt8(0) AS kind, key, toUInt32(position - 1) AS pos, ts_us, id,
               replica, ttft_ms
        FROM usage_records
        ARRAY JOIN block_hashes AS key, arrayEnumerate(block_hashes) AS position
        WHERE {where}
        UNION ALL
        SELECT model, toUInt8(1) AS kind, assumeNotNull(prefix_key) AS key, toUInt32(0) AS pos,
               ts_us, id, replica, ttft_ms
        FROM usage_records WHERE {where} AND isNotNull(prefix_key)
    )"""


#: The position of a key's latest use before the range: after every real one, so
#: that use sorts last among a request's own (it has none in the range).
_LOOKBACK_POS = "toUInt32(4294967295)"


def _uses_and_lookback(scope: Scope, group: str) -> str:
    """Within `group`'s filter, every use from `from_us` on, and per (model, kind,
    key) of those uses the latest one of the W before (only it can be a use's
    previous carrier; a hot system-prompt block has millions there)."""
    in_range = uses_of(scope.in_range())
    return f"""
    SELECT model, kind, key, ts_us, id, ttft_ms, pos FROM ({in_range}) WHERE {group}
    UNION ALL
    SELECT model, kind, key, tupleElement(last, 1) AS ts_us, tupleElement(last, 2) AS id,
           tupleElement(last, 3) AS ttft_ms, {_LOOKBACK_POS} AS pos
    FROM (
        SELECT model, kind, key,
               argMax((ts_us, id, ifNull(ttft_ms, nan)), (ts_us, id)) AS last
        FROM ({uses_of(scope.before_range())})
        WHERE {group} AND key GLOBAL IN (SELECT key FROM ({in_range}) WHERE {group})
        GROUP BY model, kind, key
    )"""


def uses_sql(scope: Scope, shard: int, shards: int) -> str:
    """Fill pass_uses with the uses of one shard of keys at or after `from_us`,
    each with its seen flag and previous carrier (module docstring).

    One grouping, by key: its uses sorted by (ts, id, position), each paired with
    the one before. A request that carries a key at several positions does not
    see its own copy: its later positions come right after its first (same ts and
    id) and are marked `seen = 2`, "as at the first position", which the
    per-request step reads (`blocks_exact_sql`); the use after them, another
    request's, pairs with the last of them, whose ts and TTFT are the request's.
    (Grouping by (key, request) first said the same at a third more CPU.)"""
    w = int(scope.window_us)
    shard_of = f"cityHash64(model, key) % {int(shards)} = {int(shard)}"
    return f"""
INSERT INTO pass_uses (id, kind, key, pos, seen, prev_ts, prev_ttft)
SELECT u_id, kind, key, u_pos, seen, p_ts, p_ttft
FROM (
    SELECT kind, key, u_id, u_pos, u_ts, p_ts, p_ttft,
           if(j > 1 AND u_id = p_id, toUInt8(2), toUInt8(j > 1 AND u_ts - p_ts <= {w})) AS seen
    FROM (
        SELECT model, kind, key,
               arraySort(x -> (tupleElement(x, 1), tupleElement(x, 2), tupleElement(x, 4)),
                         groupArray((ts_us, id, ifNull(ttft_ms, nan), pos))) AS u
        FROM ({_uses_and_lookback(scope, shard_of)})
        GROUP BY model, kind, key
    )
    ARRAY JOIN
        arrayEnumerate(u) AS j,
        arrayMap(x -> tupleElement(x, 1), u) AS u_ts,
        arrayMap(x -> tupleElement(x, 2), u) AS u_id,
        arrayMap(x -> tupleElement(x, 4), u) AS u_pos,
        {_previous("arrayMap(x -> tupleElement(x, 1), u)", "toInt64(0)")} AS p_ts,
        {_previous("arrayMap(x -> tupleElement(x, 2), u)", "toInt64(0)")} AS p_id,
        {_previous("arrayMap(x -> tupleElement(x, 3), u)", "nan")} AS p_ttft
    WHERE u_ts >= {int(scope.from_us)}
)"""


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
    "cache_write_1h_tokens",
    "cache_ttl_s",
    "provider",
    "scenario",
    "tenant",
    "segments",
    "provider_miss_reason",
    "provider_missed_tokens",
)


def blocks_sql() -> str:
    """Per request: its leading run of seen blocks and its deepest seen block's
    previous carrier (ts, TTFT) and key, by plain aggregates (no arrays): the first
    unseen position, and the carrier of the last position marked `seen = 1`. That
    is the deepest of the run when the request's seen flags are prefix-closed (no
    seen position after its first unseen one) and it carries no key twice (no
    `seen = 2`), as every request of chained block hashes does; `exact` says so.
    For a request where it does not hold, `blocks_exact_sql` is the definition."""
    return """
SELECT id, run, tupleElement(deep, 1) AS deep_prev_ts, tupleElement(deep, 2) AS deep_prev_ttft,
       tupleElement(deep, 3) AS deep_key, toUInt8(twos = 0 AND (miss = 0 OR top < miss)) AS exact
FROM (
    SELECT id, if(miss = 0, toInt64(n), toInt64(miss) - 1) AS run, miss, top, twos,
           if(run > 0, seen_deep, (toInt64(0), nan, toInt64(0))) AS deep
    FROM (
        SELECT id, count() AS n, minIf(pos + 1, seen = 0) AS miss,
               maxIf(pos + 1, seen != 0) AS top, countIf(seen = 2) AS twos,
               argMaxIf((prev_ts, prev_ttft, key), pos, seen = 1) AS seen_deep
        FROM pass_uses WHERE kind = 0 GROUP BY id
    )
)"""


def blocks_exact_sql() -> str:
    """`blocks_sql`'s columns by definition, for any seen flags: each request's
    uses as an array in position order, the run up to the first unseen one and its
    last element. A position marked `seen = 2` (the key again, `uses_sql`) is seen
    when its first position is, which comes earlier in the run: so it never ends
    the run, and when it is the deepest, its first position carries the previous
    carrier."""
    return """
SELECT id, run, tupleElement(deep, 3) AS deep_prev_ts, tupleElement(deep, 4) AS deep_prev_ttft,
       tupleElement(deep, 5) AS deep_key, toUInt8(1) AS exact
FROM (
    SELECT id, run,
           if(tupleElement(last, 2) = 2,
              b[arrayFirstIndex(x -> tupleElement(x, 5) = tupleElement(last, 5), b)],
              last) AS deep
    FROM (
        SELECT id, b, if(miss = 0, toInt64(length(b)), toInt64(miss) - 1) AS run,
               if(run > 0, b[run], (toUInt32(0), toUInt8(0), toInt64(0), nan, toInt64(0))) AS last
        FROM (
            SELECT id, arraySort(x -> tupleElement(x, 1),
                                 groupArray((pos, seen, prev_ts, prev_ttft, key))) AS b,
                   arrayFirstIndex(x -> tupleElement(x, 2) = 0, b) AS miss
            FROM pass_uses WHERE kind = 0 GROUP BY id
        )
    )
)"""


def _prefix_per_request() -> str:
    return """
SELECT id, seen AS p_seen, prev_ts AS p_prev_ts, prev_ttft AS p_prev_ttft
FROM pass_uses WHERE kind = 1"""


#: The predecessor of a session's first request: (id, ts, prompt, block size, blocks).
_NO_REQUEST = "(toInt64(0), toInt64(0), toInt64(0), toInt64(0), emptyArrayInt64(), '')"


def _sessions(scope: Scope) -> str:
    """Per session request computed: whether it has a previous request in its
    session and, if so, that request's prompt_tokens, block size and block count
    and the leading blocks the two share (counted up to the shorter of the two).
    Read from session_requests: each session's requests from `from_us` on, and
    its latest one before (through the primary key, however long ago)."""
    sessions = (
        "session_id GLOBAL IN (SELECT session_id FROM usage_records "
        f"WHERE {scope.computed()} AND isNotNull(session_id))"
    )
    high = int(scope.high_id)
    return f"""
SELECT s_id AS id, toUInt8(j > 1) AS s_has_prev,
       tupleElement(prev, 3) AS s_prev_prompt, tupleElement(prev, 4) AS s_prev_bs,
       toInt64(length(tupleElement(prev, 5))) AS s_prev_blocks,
       if(first_diff = 0, toInt64(m), toInt64(first_diff) - 1) AS s_common, s_switched
FROM (
    SELECT j, s_id, s_ts, prev, m,
           toUInt8(j > 1 AND tupleElement(prev, 6) != ''
                   AND tupleElement(prev, 6) != tupleElement(cur, 6)) AS s_switched,
           arrayFirstIndex((a, b) -> a != b,
                           arraySlice(tupleElement(cur, 5), 1, m),
                           arraySlice(tupleElement(prev, 5), 1, m)) AS first_diff
    FROM (
        SELECT j, tupleElement(cur, 1) AS s_id, tupleElement(cur, 2) AS s_ts, cur, prev,
               least(length(tupleElement(cur, 5)), length(tupleElement(prev, 5))) AS m
        FROM (
            SELECT arraySort(x -> (tupleElement(x, 2), tupleElement(x, 1)), groupArray(r)) AS s
            FROM (
                SELECT session_id, (id, ts_us, prompt_tokens, block_size, block_hashes, model) AS r
                FROM session_requests
                WHERE {scope.in_range()} AND {sessions}
                LIMIT 1 BY session_id, id
                UNION ALL
                SELECT session_id,
                       argMax((id, ts_us, prompt_tokens, block_size, block_hashes, model),
                              (ts_us, id)) AS r
                FROM session_requests
                WHERE ts_us < {int(scope.from_us)} AND id <= {high} AND {sessions}
                GROUP BY session_id
            )
            GROUP BY session_id
        )
        ARRAY JOIN arrayEnumerate(s) AS j, s AS cur, {_previous("s", _NO_REQUEST)} AS prev
    )
    WHERE s_ts >= {int(scope.from_us)}
)"""


def reuse_sql(scope: Scope) -> str:
    """One row per computed record: RECORD_COLUMNS, `n_blocks` and `has_blocks`
    (the record gave block_hashes, maybe empty), the prefix key's seen flag and
    carrier, and the session columns of `_sessions` (0 where they do not apply).
    Reads pass_uses. The block columns (`blocks_sql`) are read apart and joined by
    the caller: whether they need `blocks_exact_sql` is known only once read."""
    cols = ", ".join(RECORD_COLUMNS)
    records = f"""
SELECT {cols}, toInt64(length(block_hashes)) AS n_blocks, has_blocks,
       if(length(block_hashes) > 0, block_hashes[1], toInt64(0)) AS first_block
FROM usage_records WHERE {scope.computed()}"""
    joined = records
    for n, part in enumerate((_prefix_per_request(), _sessions(scope))):
        joined = (
            f"SELECT * FROM ({joined}) AS l{n} GLOBAL ANY LEFT JOIN ({part}) AS r{n} USING (id)"
        )
    return joined


def same_replica_sql(scope: Scope) -> str:
    """The ids in pass_candidates whose own replica carried their key at most W
    before them (an earlier request by (ts, id)): the uses of the candidates' keys
    from `from_us` on, plus the latest of the W before, per (model, kind, key,
    replica), sorted, each candidate's own use paired with the one before it, as
    `uses_sql` does without the replica."""
    w = int(scope.window_us)
    asked = "isNotNull(replica) AND key GLOBAL IN (SELECT key FROM pass_candidates)"
    return f"""
SELECT c_id AS id
FROM (
    SELECT model, kind, key,
           arraySort(x -> (tupleElement(x, 1), tupleElement(x, 2)), groupArray((ts, id))) AS u
    FROM (
        SELECT DISTINCT model, kind, key, replica, ts_us AS ts, id
        FROM ({uses_of(scope.in_range())}) WHERE {asked}
        UNION ALL
        SELECT model, kind, key, replica, tupleElement(last, 1) AS ts, tupleElement(last, 2) AS id
        FROM (
            SELECT model, kind, key, replica, argMax((ts_us, id), (ts_us, id)) AS last
            FROM ({uses_of(scope.before_range())}) WHERE {asked}
            GROUP BY model, kind, key, replica
        )
    )
    GROUP BY model, kind, key, replica
)
ARRAY JOIN
    arrayEnumerate(u) AS j,
    arrayMap(x -> tupleElement(x, 1), u) AS c_ts,
    arrayMap(x -> tupleElement(x, 2), u) AS c_id,
    {_previous("arrayMap(x -> tupleElement(x, 1), u)", "toInt64(0)")} AS p_ts
WHERE j > 1 AND c_ts - p_ts <= {w}
  AND (c_id, model, kind, key) GLOBAL IN (SELECT id, model, kind, key FROM pass_candidates)"""
