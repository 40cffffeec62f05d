"""The calls of conversations (records with a `session_id`) in a range, for
`GET /v1/sessions` (`service.analytics.session_report`); from ClickHouse in a
deployment that keeps its records there."""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.analytics.session_report import CALL_COLUMNS, empty_calls
from service.clickhouse import clickhouse_of
from service.clickhouse import reads as ch_reads
from service.models import UsageRecord


@dataclass(frozen=True)
class CallFilter:
    """Which calls: of a service, model and tenant (None: any), in [from_us, to_us)."""

    service: str | None = None
    model: str | None = None
    tenant: str | None = None
    from_us: int | None = None
    to_us: int | None = None


def session_calls(session: Session, where: CallFilter) -> pl.DataFrame:
    """The calls with a session id that `where` picks, with CALL_COLUMNS."""
    schema = {c: empty_calls().schema[c] for c in CALL_COLUMNS}
    if (ch := clickhouse_of(session)) is not None:
        return ch_reads.session_calls(ch, where, schema)
    table = UsageRecord.__table__
    query = select(*[table.c[c] for c in CALL_COLUMNS]).where(table.c.session_id.is_not(None))
    for name in ("service", "model", "tenant"):
        value = getattr(where, name)
        if value is not None:
            query = query.where(table.c[name] == value)
    if where.from_us is not None:
        query = query.where(table.c.ts_us >= where.from_us)
    if where.to_us is not None:
        query = query.where(table.c.ts_us < where.to_us)
    rows = session.execute(query).all()
    return pl.DataFrame(rows, schema=schema, orient="row")
