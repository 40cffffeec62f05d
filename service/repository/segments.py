"""The segment rollups' reads and writes (`service.models.SegmentRollup`,
`service.rollups.segments`). Callers pass a session; nothing here commits."""

from collections.abc import Sequence
from typing import Any, cast

import polars as pl
from sqlalchemy import BigInteger, Table, case, distinct, func, literal, select
from sqlalchemy import cast as cast_
from sqlalchemy.orm import Session

from service.models import SegmentRollup
from service.rollups import segments

SEGMENT_TABLE = cast(Table, SegmentRollup.__table__)
_COLUMNS = list(segments.SCHEMA)
#: `volatile_hours`' rows.
HOURS_SCHEMA: dict[str, Any] = {
    "bucket_us": pl.Int64,
    "service": pl.Utf8,
    "model": pl.Utf8,
    "name": pl.Utf8,
    "carriers": pl.Int64,
    "distinct": pl.Int64,
    "prompt_tokens": pl.Int64,
    "lost_tokens": pl.Int64,
}
#: `segment_spans`' rows.
SPANS_SCHEMA: dict[str, Any] = {
    "service": pl.Utf8,
    "model": pl.Utf8,
    "name": pl.Utf8,
    "hours": pl.Int64,
    "carriers": pl.Int64,
}


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


def _bigint(value: Any) -> Any:
    """A sum as a bigint: PostgreSQL sums bigints as numeric."""
    return cast_(value, BigInteger)


def _in_range(models: Sequence[str], from_us: int | None, to_us: int | None) -> list[Any]:
    """The rows of the models within the bounds, without the row of the names not
    kept (`segments.FOLDED_NAME`: many names in one, never a finding's segment)."""
    c = SEGMENT_TABLE.c
    where: list[Any] = [c.model.in_(models), c.name != segments.FOLDED_NAME]
    if from_us is not None:
        where.append(c.bucket_us >= from_us)
    if to_us is not None:
        where.append(c.bucket_us < to_us)
    return where


def volatile_hours(
    session: Session,
    *,
    models: Sequence[str],
    from_us: int | None,
    to_us: int | None,
    min_requests: int,
    share: float,
) -> pl.DataFrame:
    """The volatile hours of each (service, model, segment name) in [from_us, to_us):
    at least `min_requests` carried it and more than `share` of its hashes were
    distinct (kept rows and folded ones); with their carriers, distinct variants,
    prompt and lost tokens. Found by the database, which returns those hours only."""
    c = SEGMENT_TABLE.c
    variant = case((c.hash != segments.FOLDED_HASH, c.hash))
    carriers = func.sum(c.requests)
    variants = func.count(distinct(variant)) + func.sum(c.folded)
    query = (
        select(
            c.bucket_us,
            c.service,
            c.model,
            c.name,
            _bigint(carriers),
            _bigint(variants),
            _bigint(func.sum(c.prompt_tokens)),
            _bigint(func.sum(c.lost_tokens)),
        )
        .where(*_in_range(models, from_us, to_us))
        .group_by(c.bucket_us, c.service, c.model, c.name)
        .having((carriers >= min_requests) & (variants > share * carriers))
    )
    return pl.DataFrame(
        [tuple(r) for r in session.execute(query).all()], schema=HOURS_SCHEMA, orient="row"
    )


def segment_spans(
    session: Session, *, models: Sequence[str], from_us: int | None, to_us: int | None
) -> pl.DataFrame:
    """Per (service, model, name) in [from_us, to_us), and per (model, name) with
    service '' (every service), the hours it was carried in and its carriers."""
    c = SEGMENT_TABLE.c
    where = _in_range(models, from_us, to_us)
    rows: list[tuple[Any, ...]] = []
    for service in (c.service, literal("")):
        query = (
            select(
                service,
                c.model,
                c.name,
                _bigint(func.count(distinct(c.bucket_us))),
                _bigint(func.sum(c.requests)),
            )
            .where(*where)
            .group_by(*([c.service] if service is c.service else []), c.model, c.name)
        )
        rows.extend(tuple(r) for r in session.execute(query).all())
    return pl.DataFrame(rows, schema=SPANS_SCHEMA, orient="row")


def frequent_variants(
    session: Session,
    *,
    models: Sequence[str],
    from_us: int | None,
    to_us: int | None,
    min_share: float,
) -> pl.DataFrame:
    """The rows (as stored) of the variants carried by at least `min_share` of the
    requests carrying their (model, name) in [from_us, to_us): template drift's
    candidates, found by the database in one scan (window sums per variant and per
    name: joining grouped subqueries back to the table was a nested loop on SQLite,
    quadratic in the names)."""
    c = SEGMENT_TABLE.c
    columns = [c[n] for n in _COLUMNS]
    requests = func.sum(c.requests)
    sums = (
        select(
            *columns,
            requests.over(partition_by=[c.model, c.name, c.hash]).label("variant_requests"),
            requests.over(partition_by=[c.model, c.name]).label("carriers"),
        )
        .where(*_in_range(models, from_us, to_us))
        .subquery()
    )
    s = sums.c
    query = select(*[s[n] for n in _COLUMNS]).where(
        s.hash != segments.FOLDED_HASH, s.variant_requests >= min_share * s.carriers
    )
    return _frame([tuple(r) for r in session.execute(query).all()])


def bare_variant_counts(
    session: Session, *, models: Sequence[str], from_us: int | None, to_us: int | None
) -> pl.DataFrame:
    """Per (service, model, name) in [from_us, to_us), the distinct variants sent
    without a `norm_hash` (folded ones included): template drift's fallback."""
    c = SEGMENT_TABLE.c
    bare = case((c.norm_hash.is_(None) & (c.hash != segments.FOLDED_HASH), c.hash))
    folded = case((c.hash == segments.FOLDED_HASH, c.folded), else_=0)
    query = (
        select(c.service, c.model, c.name, _bigint(func.count(distinct(bare)) + func.sum(folded)))
        .where(*_in_range(models, from_us, to_us))
        .group_by(c.service, c.model, c.name)
    )
    return pl.DataFrame(
        [tuple(r) for r in session.execute(query).all()],
        schema={"service": pl.Utf8, "model": pl.Utf8, "name": pl.Utf8, "distinct": pl.Int64},
        orient="row",
    )
