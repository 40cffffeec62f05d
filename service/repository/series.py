"""Chart rollups: the reads of the series path and the writes that derive them from
`rollups` and `prefix_rollups`. Callers pass a session; nothing here commits."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import polars as pl
from sqlalchemy import Table, func, literal, select, union_all
from sqlalchemy.orm import Session

from service.analytics.definitions import SUM_COLUMNS, as_sum
from service.models import ChartRollup
from service.repository.analytics import PREFIX_TABLE, ROLLUP_TABLE
from service.repository.bulk import insert_frame
from service.rollups.chart import CHART_SCHEMA, Scope
from service.timeunits import DAY_US as _DAY_US
from service.timeunits import HOUR_US as _HOUR_US

CHART_TABLE = cast(Table, ChartRollup.__table__)
CHART_COLUMNS = list(CHART_SCHEMA)
#: What a series read needs of each chart row.
SERIES_COLUMNS = ["bucket_us", *SUM_COLUMNS, "ttft_hit", "ttft_miss", "replicas", "first_keys"]
SERIES_SCHEMA = {name: CHART_SCHEMA[name] for name in SERIES_COLUMNS}
#: What a series read needs of a chart row that is a whole bucket: no blobs.
ROW_COLUMNS = [
    "bucket_us",
    *SUM_COLUMNS,
    *[f"ttft_{o}_{q}" for o in ("hit", "miss") for q in ("p50", "p95")],
    "replica_count",
    "prefix_count",
]


@dataclass(frozen=True)
class Segment:
    """Chart rows of one grain over [from_us, to_us)."""

    grain_s: int
    from_us: int
    to_us: int


def _frame(rows: Sequence[Any], schema: dict[str, Any]) -> pl.DataFrame:
    """Rows -> a frame, built column by column (a month of 5-minute rows: several
    times faster than row by row)."""
    if not rows:
        return pl.DataFrame(schema=schema)
    columns = zip(*rows, strict=True)
    return pl.DataFrame(
        [
            pl.Series(name, values, dtype)
            for (name, dtype), values in zip(schema.items(), columns, strict=True)
        ]
    )


def scope_condition(
    scope: Scope, every_value: bool = False, values: Sequence[str] | None = None
) -> list[Any]:
    """The chart rows of one scope: the unique index's key before `bucket_us`.
    `every_value`: the rows of every value of the scope's group field; `values`: of
    those values of it."""
    c = CHART_TABLE.c
    value: list[Any]
    if values is not None:
        value = [c.group_value.in_(list(values))]
    else:
        value = [] if every_value else [c.group_value == scope.group_value]
    return [
        c.level == scope.level,
        c.service == scope.service,
        c.model == scope.model,
        c.group_by == scope.group_by,
        *value,
    ]


def _in_segment(scope: Scope, segment: Segment, every_value: bool = False) -> list[Any]:
    """The chart rows of one scope in one segment: a range of the (grain, level,
    service, model, group, bucket) unique index."""
    c = CHART_TABLE.c
    return [
        c.grain_s == segment.grain_s,
        *scope_condition(scope, every_value),
        c.bucket_us >= segment.from_us,
        c.bucket_us < segment.to_us,
    ]


def chart_extent(
    session: Session,
    scope: Scope,
    from_us: int | None,
    to_us: int | None,
    every_value: bool = False,
) -> tuple[int, int] | None:
    """The first and last minute buckets with data of a scope within the bounds (two
    index seeks), or None when there is none."""
    c = CHART_TABLE.c
    where = [c.grain_s == 60, *scope_condition(scope, every_value)]
    if from_us is not None:
        where.append(c.bucket_us >= from_us)
    if to_us is not None:
        where.append(c.bucket_us < to_us)
    low = session.scalar(select(func.min(c.bucket_us)).where(*where))
    if low is None:
        return None
    high = session.scalar(select(func.max(c.bucket_us)).where(*where))
    return int(low), int(high if high is not None else low)


def fetch_series_rows(
    session: Session,
    scope: Scope,
    segments: Sequence[Segment],
    columns: Sequence[str] = SERIES_COLUMNS,
    every_value: bool = False,
) -> pl.DataFrame:
    """The chart rows of one scope over the segments, in one statement (each part is
    a range of the (grain, level, service, model, group, bucket) unique index).
    `every_value`: of every value of the scope's group field, with `group_value`."""
    c = CHART_TABLE.c
    if every_value:
        columns = ["group_value", *columns]
    schema = {name: CHART_SCHEMA[name] for name in columns}
    if not segments:
        return pl.DataFrame(schema=schema)
    parts = [
        select(*[c[name] for name in columns]).where(*_in_segment(scope, segment, every_value))
        for segment in segments
    ]
    query = parts[0] if len(parts) == 1 else union_all(*parts)
    return _frame(session.execute(query).all(), schema)


def sum_series_rows(
    session: Session,
    scope: Scope,
    segments: Sequence[Segment],
    columns: Sequence[str],
) -> dict[str, float]:
    """Sums of the columns over the segments, computed by the database."""
    totals: dict[str, float] = dict.fromkeys(columns, 0)
    c = CHART_TABLE.c
    for segment in segments:
        row = session.execute(
            select(*[func.coalesce(func.sum(c[name]), 0) for name in columns]).where(
                *_in_segment(scope, segment)
            )
        ).one()
        for name, value in zip(columns, row, strict=True):
            totals[name] += as_sum(name, value)
    return totals


def scope_values(
    session: Session, level: int, service: str, model: str, grain_s: int
) -> list[tuple[str, str]]:
    """Distinct (service, model) of the chart rows of a level and grain matching the
    given service/model ('' matches any)."""
    c = CHART_TABLE.c
    query = select(c.service, c.model).where(
        c.grain_s == grain_s, c.level == level, c.group_by == ""
    )
    if service:
        query = query.where(c.service == service)
    if model:
        query = query.where(c.model == model)
    return [(s, m) for s, m in session.execute(query.distinct()).all()]


# --- deriving them ---------------------------------------------------------------


def delete_chart_from(
    session: Session, grain_s: int, from_us: int | None, to_us: int | None = None
) -> None:
    """Chart rows of one grain from `from_us` on (None: all), before `to_us` if given."""
    where = CHART_TABLE.c.grain_s == grain_s
    if from_us is not None:
        where &= CHART_TABLE.c.bucket_us >= from_us
    if to_us is not None:
        where &= CHART_TABLE.c.bucket_us < to_us
    session.execute(CHART_TABLE.delete().where(where))


def insert_chart(session: Session, frame: pl.DataFrame) -> None:
    insert_frame(session, CHART_TABLE, frame, CHART_COLUMNS)


def load_rollups_for_chart(session: Session, from_us: int, to_us: int) -> pl.DataFrame:
    """Minute `rollups` rows of [from_us, to_us), as `chart.from_rollups` takes them."""
    t = ROLLUP_TABLE.c
    names = ["bucket_us", "service", "model", "replica", *SUM_COLUMNS, "ttft_hit", "ttft_miss"]
    schema = {n: CHART_SCHEMA.get(n, pl.Utf8) for n in names}
    query = select(*[t[n] for n in names]).where(
        t.grain_s == 60, t.bucket_us >= from_us, t.bucket_us < to_us
    )
    return _frame(session.execute(query).all(), schema)


def load_prefix_keys_for_chart(session: Session, from_us: int, to_us: int) -> pl.DataFrame:
    """Distinct (bucket, service, model, first_key) of minute `prefix_rollups` rows."""
    t = PREFIX_TABLE.c
    query = (
        select(t.bucket_us, t.service, t.model, t.first_key)
        .where(t.grain_s == 60, t.bucket_us >= from_us, t.bucket_us < to_us)
        .distinct()
    )
    schema = {"bucket_us": pl.Int64, "service": pl.Utf8, "model": pl.Utf8, "first_key": pl.Int64}
    return _frame(session.execute(query).all(), schema)


def load_chart(session: Session, grain_s: int, from_us: int, to_us: int) -> pl.DataFrame:
    c = CHART_TABLE.c
    query = select(*[c[n] for n in CHART_COLUMNS]).where(
        c.grain_s == grain_s, c.bucket_us >= from_us, c.bucket_us < to_us
    )
    return _frame(session.execute(query).all(), CHART_SCHEMA)


def rollup_hours(session: Session, from_us: int | None) -> list[int]:
    """The hour buckets holding `rollups` data (from the hour of `from_us` on), in
    order: one value per hour with data, however far apart those hours are."""
    t = ROLLUP_TABLE.c
    where = [t.grain_s == 3600]
    if from_us is not None:
        where.append(t.bucket_us >= (from_us // _HOUR_US) * _HOUR_US)
    query = select(t.bucket_us).where(*where).distinct().order_by(t.bucket_us)
    return [int(b) for b in session.scalars(query).all()]


def count_buckets_with_data(
    session: Session,
    scope: Scope,
    segments: Sequence[Segment],
    bucket_us: int,
    limit: int,
) -> int:
    """How many `bucket_us` buckets hold chart rows of one scope over the segments
    (whose grains divide the bucket), counting at most `limit`: the database stops
    there."""
    c = CHART_TABLE.c
    parts = [
        select((c.bucket_us // bucket_us).label("bucket")).where(*_in_segment(scope, segment))
        for segment in segments
    ]
    if not parts:
        return 0
    rows = parts[0] if len(parts) == 1 else union_all(*parts)
    filled = rows.subquery()
    buckets = select(filled.c.bucket).distinct().limit(limit).subquery()
    return int(session.scalar(select(func.count()).select_from(buckets)) or 0)


def sums_by_model(
    session: Session,
    service: str | None,
    segments: Sequence[Segment],
    columns: Sequence[str],
    model: str | None = None,
) -> dict[str, dict[str, float]]:
    """Per model, the sums of `columns` over the segments: of one service (level 0)
    or of all services (level 2); only `model` when one is given. One grouped query
    per segment."""
    c = CHART_TABLE.c
    level = 0 if service is not None else 2
    totals: dict[str, dict[str, float]] = {}
    for segment in segments:
        query = (
            select(c.model, *[func.sum(c[name]) for name in columns])
            .where(
                c.grain_s == segment.grain_s,
                c.level == level,
                c.service == (service or ""),
                c.group_by == "",
                c.bucket_us >= segment.from_us,
                c.bucket_us < segment.to_us,
                *([c.model == model] if model is not None else []),
            )
            .group_by(c.model)
        )
        for name, *values in session.execute(query).all():
            sums = totals.setdefault(name, dict.fromkeys(columns, 0))
            for column, value in zip(columns, values, strict=True):
                sums[column] += as_sum(column, value)
    return totals


def newest_minute(session: Session, scope: Scope) -> int | None:
    """The newest minute bucket of a scope (one index seek)."""
    c = CHART_TABLE.c
    return session.scalar(
        select(func.max(c.bucket_us)).where(c.grain_s == 60, *scope_condition(scope))
    )


PREFIX_SUMS = [
    "requests",
    "prompt_tokens",
    "cached_tokens",
    "cacheable_tokens",
    "rewarms",
    "rewarm_tokens",
]


def rebuild_prefix_days(session: Session, from_us: int | None, to_us: int | None = None) -> None:
    """Daily `prefix_rollups` rows from the day holding `from_us` on (None: all),
    up to the day holding `to_us - 1` if given, summed by the database from the
    hourly rows (plain sums: exact)."""
    t = PREFIX_TABLE.c
    day_start = None if from_us is None else (from_us // _DAY_US) * _DAY_US
    stale = t.grain_s == 86_400
    hours = t.grain_s == 3600
    if day_start is not None:
        stale &= t.bucket_us >= day_start
        hours &= t.bucket_us >= day_start
    if to_us is not None:
        day_end = -(-to_us // _DAY_US) * _DAY_US
        stale &= t.bucket_us < day_end
        hours &= t.bucket_us < day_end
    session.execute(PREFIX_TABLE.delete().where(stale))
    day = (t.bucket_us // _DAY_US) * _DAY_US
    keys = [t.service, t.model, t.replica, t.first_key]
    query = (
        select(literal(86_400), day, *keys, *[func.sum(t[name]) for name in PREFIX_SUMS])
        .where(hours)
        .group_by(day, *keys)
    )
    names = ["grain_s", "bucket_us", "service", "model", "replica", "first_key", *PREFIX_SUMS]
    session.execute(PREFIX_TABLE.insert().from_select(names, query))
