"""The rows the analytics pass derives from the records it reads: for records in
a session, their place in it (`session_requests`, sorted by session, so a pass
finds each session's request before its range through the primary key, however
old). Block uses are not derived at all: the pass reads them from the records'
own arrays (service.clickhouse.pass_sql `uses_of`).

Why the pass writes them, not the insert. Materialized views wrote them in the
insert, after the record's own part: a process killed between the two kept the
records and lost their rows for good, since the re-post found the records stored
and skipped them (issue 33: cacheable tokens 25.5M instead of 54.1M, history
rewrites 0 or 4,979 instead of 10,061 on the conversation trace). Derived by the
pass, from records already durable, before the pass commits its cursor: a pass
that dies anywhere derives them again on its next run. Derived twice, the copies
are equal row for row (every column is a function of the record), so the table's
ReplacingMergeTree folds them at its next merge and the pass's read takes one
row per (session, request) until then (`LIMIT 1 BY`).

The records are those with ids in (after_id, high_id]: the pass's new records,
whatever their ts.
"""

from __future__ import annotations

from service.clickhouse.client import ClickHouse


def _new(after_id: int, high_id: int) -> str:
    return f"id > {int(after_id)} AND id <= {int(high_id)}"


def session_requests_sql(after_id: int, high_id: int) -> str:
    columns = "session_id, ts_us, id, version, rid, prompt_tokens, block_size, block_hashes, model"
    return f"""
INSERT INTO session_requests ({columns})
SELECT assumeNotNull(session_id) AS session_id, ts_us, id, version,
       cityHash64(request_id) AS rid, prompt_tokens, ifNull(block_size, 0) AS block_size,
       block_hashes, model
FROM usage_records
WHERE {_new(after_id, high_id)} AND isNotNull(session_id)"""


def derive(ch: ClickHouse, after_id: int, high_id: int) -> None:
    """Write the derived rows of the records with ids in (after_id, high_id]."""
    if high_id <= after_id:
        return
    ch.command(session_requests_sql(after_id, high_id))
