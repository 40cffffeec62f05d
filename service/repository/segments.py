"""The segment rollups' reads and writes (`service.models.SegmentRollup`,
`service.rollups.segments`). Callers pass a session; nothing here commits."""

from typing import cast

import polars as pl
from sqlalchemy import Table, select
from sqlalchemy.orm import Session

from service.models import SegmentRollup
from service.rollups import segments

SEGMENT_TABLE = cast(Table, SegmentRollup.__table__)
_COLUMNS = list(segments.SCHEMA)


def _frame(rows: list[tuple[object, ...]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=segments.SCHEMA, orient="row")


def take_segment_rollups(session: Session, from_bucket_us: int) -> pl.DataFrame:
    """Remove and return the rows from an hour on, for the pass to merge and write
    back (a forward pass only changes the tail)."""
    where = SEGMENT_TABLE.c.bucket_us >= from_bucket_us
    query = select(*[SEGMENT_TABLE.c[c] for c in _COLUMNS]).where(where)
    rows = [tuple(r) for r in session.execute(query).all()]
    session.execute(SEGMENT_TABLE.delete().where(where))
    return _frame(rows)


def delete_segment_rollups_from(session: Session, from_bucket_us: int) -> None:
    session.execute(SEGMENT_TABLE.delete().where(SEGMENT_TABLE.c.bucket_us >= from_bucket_us))


def insert_segment_rollups(session: Session, frame: pl.DataFrame) -> None:
    if not frame.is_empty():
        session.execute(SEGMENT_TABLE.insert(), frame.select(_COLUMNS).to_dicts())


def segment_rollups(
    session: Session,
    *,
    models: list[str] | None,
    from_us: int | None,
    to_us: int | None,
) -> pl.DataFrame:
    """The rows of the hours starting in [from_us, to_us) for the given models
    (every service of each: template drift compares services)."""
    table = SEGMENT_TABLE
    query = select(*[table.c[c] for c in _COLUMNS])
    if models is not None:
        query = query.where(table.c.model.in_(models))
    if from_us is not None:
        query = query.where(table.c.bucket_us >= from_us)
    if to_us is not None:
        query = query.where(table.c.bucket_us < to_us)
    return _frame([tuple(r) for r in session.execute(query).all()])


def newest_segment_bucket(session: Session) -> int | None:
    return session.scalar(
        select(SEGMENT_TABLE.c.bucket_us).order_by(SEGMENT_TABLE.c.bucket_us.desc()).limit(1)
    )
