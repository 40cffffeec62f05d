"""Retention's queries: find and delete old raw records in small id ranges, and the
retention horizon the analytics pass must respect. Callers pass a session; nothing
here commits."""

import polars as pl
from sqlalchemy import Table, select
from sqlalchemy.orm import Session

from service.clickhouse import clickhouse_of
from service.clickhouse.client import ClickHouse, connect
from service.models import AnalyticsCursor, AnalyticsState
from service.repository.locks import ingest_quiesced
from service.repository.usage import REJECTED_TABLE, USAGE_TABLE

#: A ClickHouse deployment's tables, each partitioned by this day of `ts_us`
#: (migrations/clickhouse: the partition key, and so the partition's id).
CLICKHOUSE_TABLES = ("usage_records", "block_uses", "session_requests", "request_results")
_DAY = "toYYYYMMDD(toDateTime(intDiv({}, 1000000)))"

# An `analytics_state` row: its `max_ts_us` is the newest cutoff retention has used,
# so records with an older `ts` may be gone (its `state` blob is unused).
HORIZON = "retention"


def get_horizon(session: Session) -> int | None:
    row = session.get(AnalyticsState, HORIZON)
    return row.max_ts_us if row else None


def raise_horizon(session: Session, cutoff_us: int) -> None:
    """Written before the first delete under this cutoff, in the same transaction, so
    the analytics pass never sees deleted records without knowing it."""
    row = session.get(AnalyticsState, HORIZON)
    if row is None:
        session.add(AnalyticsState(name=HORIZON, max_ts_us=cutoff_us, state=b""))
    elif row.max_ts_us < cutoff_us:
        row.max_ts_us = cutoff_us
    session.flush()


def _next_range(
    session: Session,
    table: Table,
    ts_column: str,
    after_id: int,
    up_to_id: int | None,
    before_us: int,
    limit: int,
) -> tuple[int, int] | None:
    """(low, high) ids of the next `limit` matching rows after `after_id`: a walk
    along the primary key (ids grow with arrival, so old rows come first), no scan
    of the whole table per batch and no extra index."""
    ts = table.c[ts_column]
    query = select(table.c.id).where(table.c.id > after_id, ts < before_us)
    if up_to_id is not None:
        query = query.where(table.c.id <= up_to_id)
    ids = session.scalars(query.order_by(table.c.id).limit(limit)).all()
    return (ids[0], ids[-1]) if ids else None


def _delete_range(
    session: Session, table: Table, ts_column: str, low: int, high: int, before_us: int
) -> int:
    ts = table.c[ts_column]
    result = session.execute(
        table.delete().where(table.c.id >= low, table.c.id <= high, ts < before_us)
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def delete_old_usage(
    session: Session, *, after_id: int, up_to_id: int, before_us: int, limit: int
) -> tuple[int, int] | None:
    """Delete up to `limit` usage records with `ts_us < before_us` and an id in
    (after_id, up_to_id]; returns (deleted, last id examined), None when done.
    On ClickHouse: the day partitions wholly before `before_us` that hold no id
    above `up_to_id`, in one step (`drop_counted_days`)."""
    if (ch := clickhouse_of(session)) is not None:
        if after_id >= up_to_id:
            return None
        return drop_counted_days(session, ch, before_us, up_to_id), up_to_id
    found = _next_range(session, USAGE_TABLE, "ts_us", after_id, up_to_id, before_us, limit)
    if found is None:
        return None
    low, high = found
    return _delete_range(session, USAGE_TABLE, "ts_us", low, high, before_us), high


def drop_counted_days(session: Session, ch: ClickHouse, before_us: int, up_to_id: int) -> int:
    """Retention on ClickHouse: drop the day partitions of every table wholly
    before `before_us` whose records all have ids <= `up_to_id` (the analytics
    cursor); returns how many usage record rows they held.

    A day is dropped whole or not at all, so the relational rule (only records
    the pass has counted go) becomes: a day holding one record above the cursor
    (history replayed into it, or a pass behind) is kept whole until a pass has
    counted it; a later run drops it. No insert may land in a checked day before
    its drop: on PostgreSQL the check and the drops wait out every insert in
    flight and hold off new ones (`ingest_quiesced`; an ingest holds that lock
    shared until its ClickHouse insert is written), on SQLite the caller's
    transaction holds the write lock (the analytics lock)."""
    with ingest_quiesced(session):
        days = _counted_days(ch, before_us, up_to_id)
        if days:
            _drop_partitions(ch, sorted(days))
    return sum(days.values())


def _drop_partitions(ch: ClickHouse, days: list[int]) -> None:
    """Drop the days of every table: on one server there; on a cluster on each
    shard's local tables (a Distributed table refuses partition operations)."""
    urls = getattr(ch, "shard_urls", ())
    if not urls:
        _drop_on(ch, days, "")
        return
    for url in urls:
        shard = connect(url, getattr(ch, "cluster", None))
        try:
            _drop_on(shard, days, "_local")
        finally:
            shard.close()


def _drop_on(ch: ClickHouse, days: list[int], suffix: str) -> None:
    for day in days:
        for table in CLICKHOUSE_TABLES:
            ch.command(f"ALTER TABLE {table}{suffix} DROP PARTITION {day}")


def _counted_days(ch: ClickHouse, before_us: int, up_to_id: int) -> dict[int, int]:
    """{day partition: usage record rows} of the days before the one of
    `before_us` whose highest id is <= `up_to_id`. The day is the tables' own
    partition expression (applied to `before_us` too), so the ids match the
    partitions whatever the server's time zone; max(id) and count() read two
    small columns of the old days only."""
    frame = ch.query(
        f"""SELECT {_DAY.format("ts_us")} AS day, max(id) AS top, count() AS n
            FROM usage_records
            WHERE {_DAY.format("ts_us")} < {_DAY.format(f"toInt64({int(before_us)})")}
            GROUP BY day""",
        {"day": pl.Int64(), "top": pl.Int64(), "n": pl.Int64()},
    )
    return {int(day): int(n) for day, top, n in frame.iter_rows() if top <= up_to_id}


def delete_old_rejected(
    session: Session, *, after_id: int, before_us: int, limit: int
) -> tuple[int, int] | None:
    """Rejected records received before `before_us`, like `delete_old_usage`."""
    found = _next_range(session, REJECTED_TABLE, "received_us", after_id, None, before_us, limit)
    if found is None:
        return None
    low, high = found
    return _delete_range(session, REJECTED_TABLE, "received_us", low, high, before_us), high


def analytics_progress(session: Session, cursor: str, state: str) -> tuple[int, int] | None:
    """(last id the analytics pass consumed, newest `ts_us` it has seen), or None
    before its first pass."""
    consumed = session.get(AnalyticsCursor, cursor)
    seen = session.get(AnalyticsState, state)
    if consumed is None or seen is None:
        return None
    return consumed.last_id, seen.max_ts_us
