"""The `group_rollups` table (service.rollups.groups) and the reads of groups from the
chart rows. Callers pass a session; nothing here commits."""

from typing import Any, cast

import polars as pl
from sqlalchemy import Table, func, or_, select
from sqlalchemy.orm import Session

from service.models import ChartRollup, GroupRollup
from service.repository.bulk import insert_frame
from service.rollups.chart import CHART_SCHEMA, Scope
from service.rollups.groups import STORED, STORED_SCHEMA

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


def first_group_bucket(session: Session, from_us: int) -> int | None:
    """The first minute with group rows from `from_us` on."""
    c = GROUP_TABLE.c
    value = session.scalar(select(func.min(c.bucket_us)).where(c.bucket_us >= from_us))
    return None if value is None else int(value)


def group_values(
    session: Session, scope: Scope, by: str, grain_s: int, from_us: int | None, to_us: int | None
) -> pl.DataFrame:
    """Per value of one group field within a scope, the sums of its chart rows of one
    grain over [from_us, to_us): the groups table and the choice of the busiest."""
    c = CHART_TABLE.c
    sums = [func.coalesce(func.sum(c[n]), 0).label(n) for n in ("requests", "prompt_tokens")]
    where = [
        c.grain_s == grain_s,
        c.level == scope.level,
        c.service == scope.service,
        c.model == scope.model,
        c.group_by == by,
    ]
    if from_us is not None:
        where.append(c.bucket_us >= from_us)
    if to_us is not None:
        where.append(c.bucket_us < to_us)
    query = select(c.group_value, *sums).where(*where).group_by(c.group_value)
    schema = {"value": pl.Utf8, "requests": pl.Int64, "prompt_tokens": pl.Int64}
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
