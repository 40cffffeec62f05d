"""The dashboard's reads beyond the series path (`repository.series`): top prefixes,
the models without prices, the events and alert states it marks, the capacity
sample, the groups' per-bucket sums (sparklines, deploy tags side by side) and the
versions that key its cached answers. Each is one indexed query
over the rollups or the small tables (or a bounded one over the records). Callers
pass a session and say which rows to read: how a range is split into rollup grains
is the service's decision (`service.services.dashboard`), so a segment arrives
planned. Nothing here writes."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl
from sqlalchemy import ColumnElement, Select, Table, case, func, select, union_all
from sqlalchemy.orm import Session

from service.analytics.definitions import as_sum
from service.clickhouse import clickhouse_of
from service.clickhouse import reads as ch_reads
from service.models import Alert, ChangeEvent, Regression
from service.repository.analytics import PREFIX_TABLE
from service.repository.series import CHART_TABLE, PREFIX_SUMS, Segment, scope_condition
from service.repository.usage import USAGE_TABLE
from service.rollups.chart import Scope as ChartScope


@dataclass(frozen=True)
class RollupRows:
    """Which (service, model) rows of a rollup a panel reads. Services and models are
    always listed: the indexes start (grain, service, bucket) and (grain, model,
    bucket), so a list bounds the read where no filter would scan every row of the
    grain (and SQLite, without statistics, picks the covering model index only when
    models are named). `model` is the selected one, None for every listed model."""

    services: tuple[str, ...]
    models: tuple[str, ...]
    model: str | None


def _in_segment(table: Table, rows: RollupRows, segment: Segment) -> ColumnElement[bool]:
    c = table.c
    models = [rows.model] if rows.model is not None else list(rows.models)
    return (
        (c.grain_s == segment.grain_s)
        & c.service.in_(list(rows.services))
        & c.model.in_(models)
        & (c.bucket_us >= segment.from_us)
        & (c.bucket_us < segment.to_us)
    )


def top_prefixes(
    session: Session, rows: RollupRows, segments: Sequence[Segment], limit: int
) -> list[dict[str, Any]]:
    """Leading prefixes (first block key) by prompt tokens, per service and model,
    summed over the `prefix_rollups` rows of the segments (one statement: a union of
    one indexed range per segment, grouped), with the distinct named replicas that
    served each."""
    if not rows.services or not segments:
        return []
    t = PREFIX_TABLE.c
    keys = ("service", "model", "first_key")
    parts = [
        select(*[t[name] for name in (*keys, "replica", *PREFIX_SUMS)]).where(
            _in_segment(PREFIX_TABLE, rows, segment)
        )
        for segment in segments
    ]
    union = union_all(*parts).subquery() if len(parts) > 1 else parts[0].subquery()
    r = union.c
    sums = {name: func.sum(r[name]) for name in PREFIX_SUMS}
    replicas = func.count(func.distinct(case((r.replica != "", r.replica), else_=None)))
    query: Select[Any] = (
        select(*[r[name] for name in keys], *sums.values(), replicas)
        .group_by(*[r[name] for name in keys])
        .order_by(sums["prompt_tokens"].desc(), r.first_key)
        .limit(limit)
    )
    names = (*keys, *PREFIX_SUMS, "replicas")
    return [dict(zip(names, row, strict=True)) for row in session.execute(query).all()]


def _events(
    session: Session, service: str | None, model: str | None, limit: int, *where: Any
) -> Sequence[ChangeEvent]:
    """Events matching `where` of the service (None: all) whose model is the
    selected one or unset (an event without a model concerns all of them), newest
    first."""
    query = select(ChangeEvent).where(*where)
    if service is not None:
        query = query.where(ChangeEvent.service == service)
    if model is not None:
        query = query.where((ChangeEvent.model == model) | ChangeEvent.model.is_(None))
    query = query.order_by(ChangeEvent.ts_us.desc(), ChangeEvent.id.desc()).limit(limit)
    return session.scalars(query).all()


def events_in_range(
    session: Session,
    service: str | None,
    model: str | None,
    from_us: int,
    to_us: int,
    limit: int,
) -> Sequence[ChangeEvent]:
    """Events of [from_us, to_us), newest first."""
    return _events(
        session, service, model, limit, ChangeEvent.ts_us >= from_us, ChangeEvent.ts_us < to_us
    )


def config_events_before(
    session: Session, service: str | None, model: str | None, to_us: int, limit: int
) -> Sequence[ChangeEvent]:
    """The latest `config` events before `to_us`, newest first."""
    return _events(
        session, service, model, limit, ChangeEvent.kind == "config", ChangeEvent.ts_us < to_us
    )


BLOCK_FRAME_SCHEMA: dict[str, Any] = {
    "id": pl.Int64,
    "ts_us": pl.Int64,
    "model": pl.Utf8,
    "prompt_tokens": pl.Int64,
    "block_size": pl.Int64,
    "block_hashes": pl.Binary,
}


def latest_block_frame(
    session: Session, model: str, from_us: int, to_us: int, limit: int
) -> pl.DataFrame:
    """The latest `limit` requests with block hashes of the model in [from_us, to_us),
    in (ts_us, id) order: what a bounded capacity replay reads."""
    if (ch := clickhouse_of(session)) is not None:
        return ch_reads.load_block_frame(ch, model=model, from_us=from_us, to_us=to_us, limit=limit)
    usage = USAGE_TABLE.c
    query = (
        select(*[usage[name] for name in BLOCK_FRAME_SCHEMA])
        .where(
            usage.model == model,
            usage.ts_us >= from_us,
            usage.ts_us < to_us,
            usage.block_hashes.is_not(None),
        )
        .order_by(usage.ts_us.desc(), usage.id.desc())
        .limit(limit)
    )
    rows = [tuple(r) for r in session.execute(query).all()]
    rows.reverse()
    return pl.DataFrame(rows, schema=BLOCK_FRAME_SCHEMA, orient="row")


def newest_usage_id(session: Session) -> int:
    """The newest arrival id: it changes whenever a record is stored, so it keys
    cached answers and replays. Unlike `repository.max_usage_id` it takes no lock and
    does not wait for in-flight batches: a dashboard answer may lag a concurrent
    batch by one refresh, and a read must not queue behind ingestion."""
    if (ch := clickhouse_of(session)) is not None:
        return ch_reads.newest_id(ch)
    return int(session.scalar(select(func.coalesce(func.max(USAGE_TABLE.c.id), 0))) or 0)


def alert_states(session: Session, regression_ids: Sequence[int]) -> dict[int, list[str]]:
    """Per regression, `kind: state` of each Slack alert it owes (`service.alerts`),
    oldest alert first. Regressions without any are absent."""
    if not regression_ids:
        return {}
    query = (
        select(Alert.regression_id, Alert.kind, Alert.state)
        .where(Alert.regression_id.in_(list(regression_ids)))
        .order_by(Alert.regression_id, Alert.id)
    )
    states: dict[int, list[str]] = {}
    for regression_id, kind, state in session.execute(query).all():
        states.setdefault(int(regression_id), []).append(f"{kind}: {state}")
    return states


def data_version(session: Session) -> tuple[int, int, int, int]:
    """Changes whenever what the dashboard shows may change: a record arrives (the
    rollups follow), an event is stored, a regression is found or updated."""
    event = session.scalar(select(func.coalesce(func.max(ChangeEvent.id), 0))) or 0
    regressions, updated = session.execute(
        select(func.count(Regression.id), func.coalesce(func.max(Regression.updated_at_us), 0))
    ).one()
    return newest_usage_id(session), int(event), int(regressions), int(updated)


def alerts_version(session: Session) -> tuple[int, int]:
    """Changes whenever an alert is queued or its delivery state moves."""
    count, updated = session.execute(
        select(func.count(Alert.id), func.coalesce(func.max(Alert.updated_us), 0))
    ).one()
    return int(count), int(updated)


# --- groups and deploy tags (chart rows per group) ---------------------------------

#: The sums the groups table's sparklines and the canary panel read per bucket.
GROUP_BUCKET_SUMS = ("requests", "prompt_tokens", "cached_tokens")
GROUP_BUCKET_SCHEMA: dict[str, Any] = {
    "value": pl.Utf8,
    "bucket_us": pl.Int64,
    **dict.fromkeys(GROUP_BUCKET_SUMS, pl.Int64),
}


def group_bucket_sums(
    session: Session,
    scope: ChartScope,
    values: Sequence[str],
    segments: Sequence[Segment],
    bucket_us: int,
) -> pl.DataFrame:
    """Per listed value of the scope's group field and per `bucket_us` bucket (the
    segments' grains divide it), GROUP_BUCKET_SUMS of its chart rows, summed by the
    database: one statement, a union of one indexed range per segment, grouped. A
    scope without a group (`group_by` '') and the value '' reads the whole scope."""
    if not values or not segments:
        return pl.DataFrame(schema=GROUP_BUCKET_SCHEMA)
    c = CHART_TABLE.c
    start = (c.bucket_us // bucket_us * bucket_us).label("bucket_us")
    parts = [
        select(c.group_value, start, *[c[name] for name in GROUP_BUCKET_SUMS]).where(
            c.grain_s == segment.grain_s,
            *scope_condition(scope, values=values),
            c.bucket_us >= segment.from_us,
            c.bucket_us < segment.to_us,
        )
        for segment in segments
    ]
    union = union_all(*parts).subquery() if len(parts) > 1 else parts[0].subquery()
    r = union.c
    names = GROUP_BUCKET_SUMS
    query = select(r.group_value, r.bucket_us, *[func.sum(r[n]) for n in names]).group_by(
        r.group_value, r.bucket_us
    )
    rows = [
        (value, int(bucket), *[int(as_sum(n, v)) for n, v in zip(names, sums, strict=True)])
        for value, bucket, *sums in session.execute(query).all()
    ]
    return pl.DataFrame(rows, schema=GROUP_BUCKET_SCHEMA, orient="row").sort("value", "bucket_us")


def first_minutes(
    session: Session, scope: ChartScope, values: Sequence[str], to_us: int
) -> dict[str, int]:
    """Per listed value of the scope's group field, its first minute with data
    before `to_us` (one grouped read of the minute rows): when a deploy tag was
    first seen."""
    if not values:
        return {}
    c = CHART_TABLE.c
    query = (
        select(c.group_value, func.min(c.bucket_us))
        .where(c.grain_s == 60, *scope_condition(scope, values=values), c.bucket_us < to_us)
        .group_by(c.group_value)
    )
    return {value: int(first) for value, first in session.execute(query).all()}
