"""The rows the analytics pass derives from the records it reads: their block uses
(`block_uses`) and, for records in a session, their place in it
(`session_requests`).

Why the pass writes them, not the insert. Materialized views wrote them in the
insert, after the record's own part: a process killed between the two kept the
records and lost their uses for good, since the re-post found the records stored
and skipped them (issue 33: cacheable tokens 25.5M instead of 54.1M on the
conversation trace). Derived by the pass, from records already durable, before the
pass commits its cursor: a pass that dies anywhere derives them again on its next
run. Derived twice, the copies are equal row for row (every column is a function
of the record), so the tables' ReplacingMergeTree folds them at its next merge and
every read of them until then tolerates them (service.clickhouse.pass_sql: uses
grouped per request and position, sessions one row per request).

The records are those with ids in (after_id, high_id]: the pass's new records,
whatever their ts.
"""

from __future__ import annotations

from service.clickhouse.client import ClickHouse


def _new(after_id: int, high_id: int) -> str:
    return f"id > {int(after_id)} AND id <= {int(high_id)}"


def block_uses_sql(after_id: int, high_id: int) -> str:
    """Every block hash (kind 0, at its position) and prefix key (kind 1, at 0)."""
    new = _new(after_id, high_id)
    columns = "model, kind, key, pos, ts_us, id, version, rid, replica, ttft_ms"
    return f"""
INSERT INTO block_uses ({columns})
SELECT model, toUInt8(0) AS kind, key, toUInt32(position - 1) AS pos, ts_us, id, version,
       cityHash64(request_id) AS rid, replica, ttft_ms
FROM usage_records
ARRAY JOIN block_hashes AS key, arrayEnumerate(block_hashes) AS position
WHERE {new}
UNION ALL
SELECT model, toUInt8(1) AS kind, assumeNotNull(prefix_key) AS key, toUInt32(0) AS pos, ts_us,
       id, version, cityHash64(request_id) AS rid, replica, ttft_ms
FROM usage_records
WHERE {new} AND isNotNull(prefix_key)"""


def session_requests_sql(after_id: int, high_id: int) -> str:
    columns = "session_id, ts_us, id, version, rid, prompt_tokens, block_size, block_hashes"
    return f"""
INSERT INTO session_requests ({columns})
SELECT assumeNotNull(session_id) AS session_id, ts_us, id, version,
       cityHash64(request_id) AS rid, prompt_tokens, ifNull(block_size, 0) AS block_size,
       block_hashes
FROM usage_records
WHERE {_new(after_id, high_id)} AND isNotNull(session_id)"""


def derive(ch: ClickHouse, after_id: int, high_id: int) -> None:
    """Write the derived rows of the records with ids in (after_id, high_id]."""
    if high_id <= after_id:
        return
    ch.command(block_uses_sql(after_id, high_id))
    ch.command(session_requests_sql(after_id, high_id))
