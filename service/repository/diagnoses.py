"""The diagnosis rollups' reads and writes (`service.models.DiagnosisRollup`,
`service.rollups.diagnoses`). Callers pass a session; nothing here commits."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import polars as pl
from sqlalchemy import BigInteger, Table, func, select
from sqlalchemy import cast as cast_
from sqlalchemy.orm import Session

from service.models import DiagnosisRollup
from service.rollups import diagnoses

DIAGNOSIS_TABLE = cast(Table, DiagnosisRollup.__table__)
_COLUMNS = list(diagnoses.SCHEMA)
#: `diagnosis_counts`' rows: the rollup's keys but the hour, summed.
COUNTS_SCHEMA: dict[str, pl.DataType] = {
    k: t for k, t in diagnoses.SCHEMA.items() if k != "bucket_us"
}


def take_diagnosis_rollups(session: Session, from_bucket_us: int) -> pl.DataFrame:
    """Remove and return the rows from an hour on, for the pass to merge and write
    back (a forward pass only changes the tail)."""
    where = DIAGNOSIS_TABLE.c.bucket_us >= from_bucket_us
    query = select(*[DIAGNOSIS_TABLE.c[c] for c in _COLUMNS]).where(where)
    rows = [tuple(r) for r in session.execute(query).all()]
    if rows:
        session.execute(DIAGNOSIS_TABLE.delete().where(where))
    return pl.DataFrame(rows, schema=diagnoses.SCHEMA, orient="row")


def delete_diagnosis_rollups(session: Session, from_us: int, to_us: int | None = None) -> None:
    c = DIAGNOSIS_TABLE.c
    where = [c.bucket_us >= from_us] + ([] if to_us is None else [c.bucket_us < to_us])
    session.execute(DIAGNOSIS_TABLE.delete().where(*where))


def insert_diagnosis_rollups(session: Session, frame: pl.DataFrame) -> None:
    if not frame.is_empty():
        session.execute(DIAGNOSIS_TABLE.insert(), frame.select(_COLUMNS).to_dicts())


def diagnosis_counts(
    session: Session,
    *,
    services: Sequence[str] | None = None,
    models: Sequence[str] | None = None,
    from_us: int | None = None,
    to_us: int | None = None,
) -> pl.DataFrame:
    """The rows of [from_us, to_us) summed over their hours, per (service, model,
    reason, verdict, segment, history_rewrite); `services`/`models`: only those."""
    c = DIAGNOSIS_TABLE.c
    where: list[Any] = []
    if services is not None:
        where.append(c.service.in_(services))
    if models is not None:
        where.append(c.model.in_(models))
    if from_us is not None:
        where.append(c.bucket_us >= from_us)
    if to_us is not None:
        where.append(c.bucket_us < to_us)
    keys = [c[k] for k in COUNTS_SCHEMA if k not in diagnoses.COUNTS]
    sums = [cast_(func.sum(c[k]), BigInteger) for k in diagnoses.COUNTS]
    query = select(*keys, *sums).where(*where).group_by(*keys)
    rows = [tuple(r) for r in session.execute(query).all()]
    return pl.DataFrame(rows, schema=COUNTS_SCHEMA, orient="row")
