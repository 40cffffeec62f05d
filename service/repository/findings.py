"""What the findings read (contract section 5b): the hourly chart rows of each
(service, model), the newest record of a scope, and the segment rollups
(`service.repository.segments`). Callers pass a session; nothing here commits."""

from collections.abc import Sequence
from typing import Any, cast

import orjson
import polars as pl
from sqlalchemy import Table, select
from sqlalchemy.orm import Session

from service.analytics.definitions import SUM_DTYPES
from service.clickhouse import clickhouse_of
from service.clickhouse import reads as ch_reads
from service.models import ChangeEvent, ChartRollup
from service.repository.usage import USAGE_TABLE

CHART_TABLE = cast(Table, ChartRollup.__table__)
HOUR_S = 3600
#: Per hour, besides the sums: whether any request had a TTFT, and the replicas.
_EXTRA = ("ttft_hit_p50", "ttft_miss_p50", "replicas")


def hourly_sums(
    session: Session,
    *,
    sums: Sequence[str],
    service: str | None,
    model: str | None,
    from_us: int | None,
    to_us: int | None,
) -> tuple[pl.DataFrame, dict[tuple[str, str], set[str]], bool]:
    """The hour rows of every (service, model) (chart level 0) starting in
    [from_us, to_us): (bucket_us, service, model, the `sums`); per scope the replicas
    that served it; whether any hour had a TTFT."""
    c = CHART_TABLE.c
    query = select(c.bucket_us, c.service, c.model, *[c[n] for n in (*sums, *_EXTRA)])
    query = query.where(c.grain_s == HOUR_S, c.level == 0, c.group_by == "")
    if service is not None:
        query = query.where(c.service == service)
    if model is not None:
        query = query.where(c.model == model)
    if from_us is not None:
        query = query.where(c.bucket_us >= from_us)
    if to_us is not None:
        query = query.where(c.bucket_us < to_us)
    rows = session.execute(query).all()
    n = len(sums)
    schema: dict[str, Any] = {
        "bucket_us": pl.Int64,
        "service": pl.Utf8,
        "model": pl.Utf8,
        **{name: SUM_DTYPES[name] for name in sums},
    }
    frame = pl.DataFrame([tuple(r[: 3 + n]) for r in rows], schema=schema, orient="row")
    replicas: dict[tuple[str, str], set[str]] = {}
    had_ttft = False
    for r in rows:
        hit, miss, names = r[3 + n], r[4 + n], r[5 + n]
        had_ttft = had_ttft or hit is not None or miss is not None
        served = replicas.setdefault((r[1], r[2]), set())
        if names:
            served.update(orjson.loads(names))
    return frame, replicas, had_ttft


def newest_record(
    session: Session, service: str, model: str, to_us: int | None
) -> tuple[str | None, float | None] | None:
    """(provider, cache_ttl_s) of the newest record of a scope before `to_us`."""
    if (ch := clickhouse_of(session)) is not None:
        return ch_reads.newest_record(ch, service, model, to_us)
    u = USAGE_TABLE.c
    query = select(u.provider, u.cache_ttl_s).where(u.service == service, u.model == model)
    if to_us is not None:
        query = query.where(u.ts_us < to_us)
    row = session.execute(query.order_by(u.ts_us.desc()).limit(1)).first()
    return None if row is None else (row[0], row[1])


def models_of(frame: pl.DataFrame) -> Sequence[str]:
    return sorted(set(frame["model"].to_list())) if frame.height else []


def config_events(
    session: Session, models: Sequence[str], to_us: int, limit: int
) -> list[tuple[str, str | None, str | None]]:
    """(service, model, description) of the newest `limit` `config` events before
    `to_us` of the models (or of no model, which concern every model), newest first:
    the KV budgets every eviction finding of a read looks up, in one statement
    rather than one per (service, model)."""
    e = ChangeEvent
    query = (
        select(e.service, e.model, e.description)
        .where(
            e.kind == "config",
            e.ts_us < to_us,
            e.model.in_(list(models)) | e.model.is_(None),
        )
        .order_by(e.ts_us.desc(), e.id.desc())
        .limit(limit)
    )
    return [(r[0], r[1], r[2]) for r in session.execute(query).all()]
