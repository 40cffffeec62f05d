"""The `group_rollups` table (service.rollups.groups) and the reads of groups from the
chart rows. Callers pass a session; nothing here commits."""

from collections.abc import Sequence
from typing import Any, cast

import polars as pl
from sqlalchemy import Table, func, or_, select, union_all
from sqlalchemy.orm import Session

from service.models import ChartRollup, GroupRollup
from service.repository.bulk import insert_frame
from service.repository.series import SERIES_COLUMNS, Segment, scope_condition
from service.rollups.chart import CHART_SCHEMA, GROUP_KEYS, Scope
from service.rollups.groups import OTHER, STORED, STORED_SCHEMA

GROUP_TABLE = cast(Table, GroupRollup.__table__)
CHART_TABLE = cast(Table, ChartRollup.__table__)


def _frame(rows: list[Any], schema: dict[str, Any]) -> pl.DataFrame:
    if not rows:
        return pl.DataFrame(schema=schema)
    return pl.DataFrame([tuple(r) for r in rows], schema=schema, orient="row")


def _between(from_us: int | None, to_us: int | None) -> list[Any]:
    c = GROUP_TABLE.c
    where = []
    if from_us is not None:
        where.append(c.bucket_us >= from_us)
    if to_us is not None:
        where.append(c.bucket_us < to_us)
    return where


def load_group_rollups(session: Session, from_us: int | None, to_us: int | None) -> pl.DataFrame:
    c = GROUP_TABLE.c
    query = select(*[c[n] for n in STORED]).where(*_between(from_us, to_us))
    return _frame(list(session.execute(query).all()), STORED_SCHEMA)


def take_group_rollups(session: Session, from_us: int, to_us: int | None = None) -> pl.DataFrame:
    """Remove and return the rows of [from_us, to_us), to merge or compact them and
    write back what stays."""
    rows = load_group_rollups(session, from_us, to_us)
    delete_group_rollups(session, from_us, to_us)
    return rows


def delete_group_rollups(session: Session, from_us: int, to_us: int | None = None) -> None:
    session.execute(GROUP_TABLE.delete().where(*_between(from_us, to_us)))


def insert_group_rollups(session: Session, frame: pl.DataFrame) -> None:
    insert_frame(session, GROUP_TABLE, frame, STORED)


def group_tokens(session: Session, from_us: int, to_us: int | None = None) -> pl.DataFrame:
    """The keys and prompt tokens of the group rows of [from_us, to_us), without their
    blobs: what the pass ranks a batch's values against (`service.rollups.groups.
    choose`). At most `group_values_kept` + 1 rows per field, minute and (service,
    model)."""
    c = GROUP_TABLE.c
    names = ["bucket_us", "service", "model", *GROUP_KEYS, "prompt_tokens"]
    query = select(*[c[n] for n in names]).where(*_between(from_us, to_us))
    return _frame(list(session.execute(query).all()), {n: STORED_SCHEMA[n] for n in names})


def group_values(
    session: Session, scope: Scope, by: str, grain_s: int, from_us: int | None, to_us: int | None
) -> pl.DataFrame:
    """Per value of one group field within a scope, the sums of its chart rows of one
    grain over [from_us, to_us) and the start of its last bucket (`last_us`): the
    values detection may watch, so never `OTHER` (the rest of an hour's values is no
    group: service.rollups.groups)."""
    c = CHART_TABLE.c
    sums = [func.coalesce(func.sum(c[n]), 0).label(n) for n in ("requests", "prompt_tokens")]
    sums.append(func.max(c.bucket_us).label("last_us"))
    where = [
        c.grain_s == grain_s,
        c.level == scope.level,
        c.service == scope.service,
        c.model == scope.model,
        c.group_by == by,
        c.group_value != OTHER,
    ]
    if from_us is not None:
        where.append(c.bucket_us >= from_us)
    if to_us is not None:
        where.append(c.bucket_us < to_us)
    query = select(c.group_value, *sums).where(*where).group_by(c.group_value)
    schema = {
        "value": pl.Utf8,
        "requests": pl.Int64,
        "prompt_tokens": pl.Int64,
        "last_us": pl.Int64,
    }
    return _frame(list(session.execute(query).all()), schema)


def _segment_rows(
    scope: Scope, segments: Sequence[Segment], columns: Sequence[str], values: Sequence[str] | None
) -> Any:
    """The chart rows of every value (or of `values`) of the scope's group field over
    the segments: a union of one range of the unique index per segment."""
    c = CHART_TABLE.c
    parts = [
        select(*[c[n] for n in columns]).where(
            c.grain_s == segment.grain_s,
            *scope_condition(scope, every_value=values is None, values=values),
            c.bucket_us >= segment.from_us,
            c.bucket_us < segment.to_us,
        )
        for segment in segments
    ]
    return parts[0] if len(parts) == 1 else union_all(*parts)


def _value_order(session: Session, column: Any) -> Any:
    """Values in code point order, as Python sorts them: SQLite compares UTF-8 bytes
    (its BINARY collation), PostgreSQL's database collation may not ("C" does)."""
    return column.collate("C") if session.get_bind().dialect.name == "postgresql" else column


def ranked_group_values(
    session: Session, scope: Scope, segments: Sequence[Segment], limit: int, offset: int
) -> tuple[list[str], int]:
    """One page of the values of the scope's group field over the segments, most
    prompt tokens first (ties by value), and how many values there are: ranked by the
    database over the chart rows' `prompt_tokens`, so only the page's values come
    back however many the range holds."""
    if not segments:
        return [], 0
    rows = _segment_rows(scope, segments, ["group_value", "prompt_tokens"], None).subquery()
    tokens = func.sum(rows.c.prompt_tokens)
    query = (
        select(rows.c.group_value, func.count().over())
        .group_by(rows.c.group_value)
        .order_by(tokens.desc(), _value_order(session, rows.c.group_value))
        .limit(limit)
        .offset(offset)
    )
    page = session.execute(query).all()
    if page:
        return [str(value) for value, _ in page], int(page[0][1])
    counted = select(func.count(func.distinct(rows.c.group_value)))
    return [], int(session.scalar(counted) or 0)


def value_series_rows(
    session: Session, scope: Scope, segments: Sequence[Segment], values: Sequence[str]
) -> pl.DataFrame:
    """The chart rows (SERIES_COLUMNS and `group_value`) of the listed values of the
    scope's group field over the segments, in one statement."""
    columns = ["group_value", *SERIES_COLUMNS]
    schema = {n: CHART_SCHEMA[n] for n in columns}
    if not values or not segments:
        return pl.DataFrame(schema=schema)
    query = _segment_rows(scope, segments, columns, values)
    return _frame(list(session.execute(query).all()), schema)


def group_chart_rows(
    session: Session,
    key: tuple[str, str],
    chosen: dict[str, list[str]],
    grain_s: int,
    from_us: int,
    columns: list[str],
) -> pl.DataFrame:
    """The chart rows of the chosen groups (values per group field) of one (service,
    model) at one grain from `from_us` on, in one statement (detection reads all
    the groups it watches at once), with their group columns."""
    c = CHART_TABLE.c
    names = ["group_by", "group_value", *columns]
    picks = [
        (c.group_by == by) & c.group_value.in_(values) for by, values in chosen.items() if values
    ]
    if not picks:
        return pl.DataFrame(schema={n: CHART_SCHEMA[n] for n in names})
    query = select(*[c[n] for n in names]).where(
        c.grain_s == grain_s,
        c.level == 0,
        c.service == key[0],
        c.model == key[1],
        or_(*picks),
        c.bucket_us >= from_us,
    )
    return _frame(list(session.execute(query).all()), {n: CHART_SCHEMA[n] for n in names})
