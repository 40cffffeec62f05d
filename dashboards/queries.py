"""The reads the dashboard needs beyond `/v1/metrics`: the filter choices, headline
totals, top prefixes, markers and the capacity sample. Each is one indexed query
over the rollups (or a bounded one over the records); nothing here writes."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl
from sqlalchemy import Select, case, func, select, union_all
from sqlalchemy.orm import Session

from service import repository
from service.analytics.definitions import REWARM_COLUMNS
from service.models import Alert, ChangeEvent, Regression
from service.repository import detection as detection_queries
from service.repository import series as chart_queries
from service.repository.series import PREFIX_SUMS
from service.rollups import chart
from service.services.analytics_pass import PREFIX_GRAINS_S
from service.services.series import plan

PREFIXES = repository.PREFIX_TABLE
USAGE = repository.USAGE_TABLE


@dataclass(frozen=True)
class Scope:
    """Which rollup rows a panel reads. Services and models are always listed: the
    indexes start (grain, service, bucket) and (grain, model, bucket), so a list
    bounds the read where no filter would scan every row of the grain (and SQLite,
    without statistics, picks the covering model index only when models are named)."""

    services: tuple[str, ...]
    models: tuple[str, ...]
    model: str | None
    from_us: int
    to_us: int

    def chart_key(self) -> tuple[int, str, str]:
        """The chart rollups answering this scope."""
        return chart.scope_key(only_service(self.services), self.model)

    def chart_segments(self) -> list[chart_queries.Segment]:
        """The range in the coarsest chart rows (days, hours, 5 and 1 minutes)."""
        return plan(self.from_us, self.to_us, 86_400)

    def segments(self) -> list[tuple[int, int, int]]:
        """(grain_s, from_us, to_us) of `prefix_rollups`: daily rows for the whole
        days of the range, hourly rows for the whole hours at its ends, minute rows
        for its ragged edges (a month reads 30 rows per prefix and replica)."""
        segments = plan(self.from_us, self.to_us, 86_400, PREFIX_GRAINS_S)
        return [(s.grain_s, s.from_us, s.to_us) for s in segments]


def only_service(services: Sequence[str]) -> str | None:
    """The service of the chart rows to read for `services`, the selected service or
    every service with data: one service means that service (and when only one has
    data, both readings give the same rows' sums), several mean all."""
    return services[0] if len(services) == 1 else None


def _where(table: Any, scope: Scope, grain_s: int, from_us: int, to_us: int) -> Any:
    return (
        (table.c.grain_s == grain_s)
        & table.c.service.in_(list(scope.services))
        & table.c.model.in_([scope.model] if scope.model is not None else list(scope.models))
        & (table.c.bucket_us >= from_us)
        & (table.c.bucket_us < to_us)
    )


def series_keys(session: Session) -> list[tuple[str, str]]:
    """Every (service, model) with data, for the filter menus (daily chart rows: one
    per (service, model) and day; every minute of data is in its day's row)."""
    return sorted(chart_queries.scope_values(session, 0, "", "", 86_400))


def newest_bucket(session: Session, services: Sequence[str], model: str | None) -> int | None:
    """The start of the newest minute bucket with data of the services (the selected
    one or all, see `only_service`) and model: one index seek."""
    if not services:
        return None
    newest = chart_queries.newest_minute(session, *chart.scope_key(only_service(services), model))
    return int(newest) if newest is not None else None


TOTAL_COLUMNS = (
    "requests",
    "prompt_tokens",
    "cached_tokens",
    "fp_prompt_tokens",
    "fp_cached_tokens",
    "cacheable_tokens",
    "rewarm_tokens",
    *REWARM_COLUMNS,
)


def range_totals(session: Session, scope: Scope) -> dict[str, int]:
    """Sums over the range, computed by the database (no rows come back): the
    headline needs only these, for the range and the one before it."""
    if not scope.services:
        return dict.fromkeys(TOTAL_COLUMNS, 0)
    return chart_queries.sum_series_rows(
        session, *scope.chart_key(), scope.chart_segments(), TOTAL_COLUMNS
    )


def top_prefixes(session: Session, scope: Scope, limit: int) -> list[dict[str, Any]]:
    """Leading prefixes (first block key) by prompt tokens, per service and model."""
    if not scope.services:
        return []
    t = PREFIXES.c
    keys = ("service", "model", "first_key")
    segments = [
        select(*[t[name] for name in (*keys, "replica", *PREFIX_SUMS)]).where(
            _where(PREFIXES, scope, grain, from_us, to_us)
        )
        for grain, from_us, to_us in scope.segments()
    ]
    rows = union_all(*segments).subquery() if len(segments) > 1 else segments[0].subquery()
    r = rows.c
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
    """Events of the range, newest first."""
    return _events(
        session, service, model, limit, ChangeEvent.ts_us >= from_us, ChangeEvent.ts_us < to_us
    )


def config_events_before(
    session: Session, service: str | None, model: str | None, to_us: int, limit: int
) -> Sequence[ChangeEvent]:
    """The latest `config` events up to the end of the range, newest first."""
    return _events(
        session, service, model, limit, ChangeEvent.kind == "config", ChangeEvent.ts_us < to_us
    )


def regressions_in_range(
    session: Session, service: str | None, model: str | None, from_us: int, to_us: int
) -> list[Regression]:
    """Regressions whose span (change to resolution, or still open) meets the range."""
    return list(detection_queries.regressions_overlapping(session, service, model, from_us, to_us))


def busiest_model(session: Session, scope: Scope) -> str | None:
    """The model with the most prompt tokens in the range."""
    if not scope.services:
        return None
    tokens = chart_queries.sum_by_model(
        session, only_service(scope.services), scope.chart_segments()
    )
    if scope.model is not None:
        tokens = {m: n for m, n in tokens.items() if m == scope.model}
    if not tokens:
        return None
    return min(tokens, key=lambda m: (-tokens[m], m))


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
    """The latest `limit` requests with block hashes of the model in the range, in
    (ts_us, id) order: what a bounded capacity replay reads."""
    columns = [USAGE.c[name] for name in BLOCK_FRAME_SCHEMA]
    query = (
        select(*columns)
        .where(
            USAGE.c.model == model,
            USAGE.c.ts_us >= from_us,
            USAGE.c.ts_us < to_us,
            USAGE.c.block_hashes.is_not(None),
        )
        .order_by(USAGE.c.ts_us.desc(), USAGE.c.id.desc())
        .limit(limit)
    )
    rows = [tuple(r) for r in session.execute(query).all()]
    rows.reverse()
    return pl.DataFrame(rows, schema=BLOCK_FRAME_SCHEMA, orient="row")


def max_usage_id(session: Session) -> int:
    """The newest arrival id: it changes whenever a record is stored, so it keys
    cached replays (no lock: a replay may lag a concurrent batch by one refresh)."""
    return int(session.scalar(select(func.coalesce(func.max(USAGE.c.id), 0))) or 0)


def alert_states(session: Session, regression_ids: Sequence[int]) -> dict[int, str]:
    """Per regression, the state of each Slack alert it owes (`service.alerts`):
    e.g. `opened: sent · resolved: pending`. Regressions without any are absent."""
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
    return {rid: " · ".join(parts) for rid, parts in states.items()}


def data_version(session: Session) -> tuple[int, int, int, int]:
    """Changes whenever what the dashboard shows may change: a record arrives (the
    rollups follow), an event is stored, a regression is found or updated."""
    usage = max_usage_id(session)
    event = session.scalar(select(func.coalesce(func.max(ChangeEvent.id), 0))) or 0
    regression = session.execute(
        select(func.count(Regression.id), func.coalesce(func.max(Regression.updated_at_us), 0))
    ).one()
    return usage, int(event), int(regression[0]), int(regression[1])


def alerts_version(session: Session) -> tuple[int, int]:
    """Changes whenever an alert is queued or its delivery state moves."""
    row = session.execute(
        select(func.count(Alert.id), func.coalesce(func.max(Alert.updated_us), 0))
    ).one()
    return int(row[0]), int(row[1])
