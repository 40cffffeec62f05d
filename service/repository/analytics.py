"""The analytics pass's reads and writes: record frames, cursors, state, rollups.
Callers pass a session; nothing here commits."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import polars as pl
from sqlalchemy import Table, Text, and_, func, or_, select
from sqlalchemy import cast as cast_
from sqlalchemy.orm import Session

from service.analytics.definitions import SUM_DTYPES
from service.clickhouse import clickhouse_of
from service.clickhouse import reads as ch_reads
from service.models import (
    AnalyticsCursor,
    AnalyticsState,
    PrefixRollup,
    Rollup,
    SegmentRollup,
)
from service.repository.bulk import insert_frame
from service.repository.locks import ingest_quiesced
from service.repository.usage import USAGE_TABLE

# --- analytics ---------------------------------------------------------------

ROLLUP_TABLE = cast(Table, Rollup.__table__)
PREFIX_TABLE = cast(Table, PrefixRollup.__table__)
_SEGMENT_TABLE = cast(Table, SegmentRollup.__table__)

USAGE_FRAME_SCHEMA: dict[str, Any] = {
    "id": pl.Int64,
    "ts_us": pl.Int64,
    "service": pl.Utf8,
    "model": pl.Utf8,
    "prompt_tokens": pl.Int64,
    "cached_tokens": pl.Int64,
    "ttft_ms": pl.Float64,
    "replica": pl.Utf8,
    "deploy": pl.Utf8,
    "session_id": pl.Utf8,
    "cache_key": pl.Utf8,
    "block_size": pl.Int64,
    "block_hashes": pl.Binary,
    "prefix_key": pl.Int64,
    "prefix_tokens": pl.Int64,
    "cache_write_tokens": pl.Int64,
    "cache_write_1h_tokens": pl.Int64,
    "provider_miss_reason": pl.Utf8,
    "provider_missed_tokens": pl.Int64,
    "cache_ttl_s": pl.Float64,
    "provider": pl.Utf8,
    "scenario": pl.Utf8,
    "tenant": pl.Utf8,
    # As JSON text, decoded by whoever reads it (service.rollups.segments), not
    # turned into Python lists by the driver row by row.
    "segments": pl.Utf8,
}


def _usage_column(name: str) -> Any:
    column = USAGE_TABLE.c[name]
    return cast_(column, Text).label(name) if name == "segments" else column


def _frame(rows: Sequence[Any], schema: dict[str, Any]) -> pl.DataFrame:
    return pl.DataFrame([tuple(r) for r in rows], schema=schema, orient="row")


def load_usage_frame(
    session: Session,
    *,
    after_id: int | None = None,
    up_to_id: int | None = None,
    model: str | None = None,
    from_us: int | None = None,
    to_us: int | None = None,
    extra_columns: Sequence[str] = (),
) -> pl.DataFrame:
    """Records as the analytics read them, ordered by (ts_us, id)."""
    names = [*USAGE_FRAME_SCHEMA, *extra_columns]
    table = USAGE_TABLE
    query = select(*[_usage_column(name) for name in names])
    if after_id is not None:
        query = query.where(table.c.id > after_id)
    if up_to_id is not None:
        query = query.where(table.c.id <= up_to_id)
    if model is not None:
        query = query.where(table.c.model == model)
    if from_us is not None:
        query = query.where(table.c.ts_us >= from_us)
    if to_us is not None:
        query = query.where(table.c.ts_us < to_us)
    query = query.order_by(table.c.ts_us, table.c.id)
    schema = {**USAGE_FRAME_SCHEMA, **{name: pl.Object for name in extra_columns}}
    return _frame(session.execute(query).all(), schema)


def get_cursor(session: Session, name: str) -> int:
    cursor = session.get(AnalyticsCursor, name)
    return cursor.last_id if cursor else 0


def set_cursor(session: Session, name: str, last_id: int, now_us: int) -> None:
    cursor = session.get(AnalyticsCursor, name)
    if cursor is None:
        session.add(AnalyticsCursor(name=name, last_id=last_id, updated_us=now_us))
    else:
        cursor.last_id, cursor.updated_us = last_id, now_us
    session.flush()


def get_state(session: Session, name: str) -> bytes | None:
    state = session.get(AnalyticsState, name)
    return state.state if state else None


def put_state(session: Session, name: str, max_ts_us: int, blob: bytes) -> None:
    state = session.get(AnalyticsState, name)
    if state is None:
        session.add(AnalyticsState(name=name, max_ts_us=max_ts_us, state=blob))
    else:
        state.max_ts_us, state.state = max_ts_us, blob
    session.flush()


ROLLUP_VALUE_COLUMNS = [c.name for c in ROLLUP_TABLE.columns if c.name not in {"id"}]
PREFIX_VALUE_COLUMNS = [c.name for c in PREFIX_TABLE.columns if c.name != "id"]


def take_rollups(session: Session, table: Table, grain_s: int, from_bucket_us: int) -> pl.DataFrame:
    """Remove and return the rows from a bucket on, so the caller can merge them with
    new data and write them back (a forward pass only changes the tail)."""
    columns = ROLLUP_VALUE_COLUMNS if table is ROLLUP_TABLE else PREFIX_VALUE_COLUMNS
    where = (table.c.grain_s == grain_s) & (table.c.bucket_us >= from_bucket_us)
    rows = session.execute(select(*[table.c[c] for c in columns]).where(where)).all()
    session.execute(table.delete().where(where))
    return pl.DataFrame(
        [tuple(r) for r in rows], schema=_table_schema(table, columns), orient="row"
    )


def delete_rollups_from(session: Session, from_bucket_us: int) -> None:
    for table in (ROLLUP_TABLE, PREFIX_TABLE):
        session.execute(table.delete().where(table.c.bucket_us >= from_bucket_us))


def delete_span_rollups(session: Session, from_us: int, to_us: int) -> None:
    """The minute and hour `rollups` and `prefix_rollups` rows and the segment rollups
    of [from_us, to_us) (hours): a span the pass rebuilds after late records. The
    daily prefix rows straddle it and are rebuilt from the hours after."""
    for table in (ROLLUP_TABLE, PREFIX_TABLE):
        within = (table.c.bucket_us >= from_us) & (table.c.bucket_us < to_us)
        session.execute(table.delete().where(within & (table.c.grain_s != 86_400)))
    seg = _SEGMENT_TABLE.c
    session.execute(
        _SEGMENT_TABLE.delete().where((seg.bucket_us >= from_us) & (seg.bucket_us < to_us))
    )


def insert_rollups(session: Session, table: Table, frame: pl.DataFrame) -> None:
    insert_frame(session, table, frame, frame.columns)


def _table_schema(table: Table, columns: Sequence[str]) -> dict[str, Any]:
    kinds = {
        "grain_s": pl.Int32,
        "service": pl.Utf8,
        "model": pl.Utf8,
        "deploy": pl.Utf8,
        "replica": pl.Utf8,
        "ttft_hit": pl.Binary,
        "ttft_miss": pl.Binary,
        **SUM_DTYPES,
    }
    return {c: kinds.get(c, pl.Int64) for c in columns}


@dataclass(frozen=True)
class RollupFilter:
    service: str | None = None
    model: str | None = None
    from_us: int | None = None
    to_us: int | None = None


def _rollup_filters(table: Table, grain_s: int, where: RollupFilter) -> Any:
    service, model, from_us, to_us = where.service, where.model, where.from_us, where.to_us
    condition = table.c.grain_s == grain_s
    if service is not None:
        condition &= table.c.service == service
    if model is not None:
        condition &= table.c.model == model
    if from_us is not None:
        condition &= table.c.bucket_us >= from_us
    if to_us is not None:
        condition &= table.c.bucket_us < to_us
    return condition


def fetch_rollups(session: Session, grain_s: int, filters: RollupFilter) -> pl.DataFrame:
    columns = ROLLUP_VALUE_COLUMNS
    where = _rollup_filters(ROLLUP_TABLE, grain_s, filters)
    rows = session.execute(select(*[ROLLUP_TABLE.c[c] for c in columns]).where(where)).all()
    return _frame(rows, _table_schema(ROLLUP_TABLE, columns))


def fetch_prefix_keys(session: Session, grain_s: int, filters: RollupFilter) -> pl.DataFrame:
    table = PREFIX_TABLE
    where = _rollup_filters(table, grain_s, filters)
    rows = session.execute(select(table.c.bucket_us, table.c.first_key).where(where)).all()
    return _frame(rows, {"bucket_us": pl.Int64, "first_key": pl.Int64})


def load_session_seeds(
    session: Session, session_ids: Sequence[str], before_us: int, up_to_id: int
) -> pl.DataFrame:
    """The latest record before `before_us` of each given session (what a recompute
    needs to judge history rewrites across its reload boundary)."""
    frames = []
    table = USAGE_TABLE
    names = list(USAGE_FRAME_SCHEMA)
    for start in range(0, len(session_ids), 500):
        chunk = list(session_ids[start : start + 500])
        latest = (
            select(table.c.session_id, func.max(table.c.ts_us).label("ts_us"))
            .where(table.c.session_id.in_(chunk), table.c.ts_us < before_us, table.c.id <= up_to_id)
            .group_by(table.c.session_id)
            .subquery()
        )
        query = (
            select(*[_usage_column(n) for n in names])
            .join(
                latest,
                (table.c.session_id == latest.c.session_id) & (table.c.ts_us == latest.c.ts_us),
            )
            .where(table.c.id <= up_to_id)
        )
        frames.append(_frame(session.execute(query).all(), USAGE_FRAME_SCHEMA))
    if not frames:
        return pl.DataFrame(schema=USAGE_FRAME_SCHEMA)
    return pl.concat(frames)


def session_successor_ts(
    session: Session, session_id: str, ts_us: int, record_id: int, up_to_id: int
) -> int | None:
    """The ts of the next record of a session after (ts_us, record_id) in (ts, id)
    order among the ids up to `up_to_id` (one seek of the (session_id, ts_us)
    index): the one request whose history_rewrite a late record can change."""
    t = USAGE_TABLE.c
    after = or_(t.ts_us > ts_us, and_(t.ts_us == ts_us, t.id > record_id))
    query = (
        select(t.ts_us)
        .where(t.session_id == session_id, after, t.id <= up_to_id)
        .order_by(t.ts_us, t.id)
        .limit(1)
    )
    found = session.scalar(query)
    return None if found is None else int(found)


def distinct_models(session: Session, limit: int) -> list[str]:
    if (ch := clickhouse_of(session)) is not None:
        return ch_reads.distinct_models(ch, limit)
    query = select(USAGE_TABLE.c.model).distinct().limit(limit)
    return list(session.scalars(query).all())


def load_block_frame(
    session: Session, *, model: str | None, from_us: int | None, to_us: int | None
) -> pl.DataFrame:
    """Only what the capacity replay reads: requests with block hashes, in order."""
    if (ch := clickhouse_of(session)) is not None:
        return ch_reads.load_block_frame(ch, model=model, from_us=from_us, to_us=to_us)
    table = USAGE_TABLE
    names = ["id", "ts_us", "model", "prompt_tokens", "block_size", "block_hashes"]
    query = select(*[table.c[n] for n in names]).where(table.c.block_hashes.is_not(None))
    if model is not None:
        query = query.where(table.c.model == model)
    if from_us is not None:
        query = query.where(table.c.ts_us >= from_us)
    if to_us is not None:
        query = query.where(table.c.ts_us < to_us)
    query = query.order_by(table.c.ts_us, table.c.id)
    return _frame(session.execute(query).all(), {n: USAGE_FRAME_SCHEMA[n] for n in names})


def newest_rollup_bucket(session: Session) -> int | None:
    return session.scalar(select(func.max(ROLLUP_TABLE.c.bucket_us)))


def max_usage_id(session: Session) -> int:
    """The highest arrival id below which every record is committed.

    On PostgreSQL, ids are taken at insert and a lower id may commit after a higher
    one; ingestion holds a shared advisory lock for its transaction, so taking the
    exclusive one here waits out every in-flight insert before reading the max
    (and releases it right after, see `ingest_quiesced`)."""
    with ingest_quiesced(session):
        return int(session.scalar(select(func.coalesce(func.max(USAGE_TABLE.c.id), 0))) or 0)


def step_high_id(session: Session, after_id: int, up_to_id: int, records: int) -> int:
    """The id of the `records`-th record after `after_id` (at most `up_to_id`): the
    end of one step of the pass. Counted in records, not in ids, so gaps in the ids
    (PostgreSQL burns one per conflicting insert) do not shrink the steps."""
    t = USAGE_TABLE.c
    ids = (
        select(t.id)
        .where(t.id > after_id, t.id <= up_to_id)
        .order_by(t.id)
        .limit(records)
        .subquery()
    )
    found = session.scalar(select(func.max(ids.c.id)))
    return up_to_id if found is None else int(found)
