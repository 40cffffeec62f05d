"""The queries of the detection job (regressions, inferred events, diagnosis data).
Callers pass a session; nothing here commits."""

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import polars as pl
from sqlalchemy import Table, func, select
from sqlalchemy.orm import Session

from service.clickhouse import clickhouse_of
from service.clickhouse import reads as ch_reads
from service.models import ChangeEvent, Regression, Rollup, UsageRecord

ROLLUPS = cast(Table, Rollup.__table__)
USAGE = cast(Table, UsageRecord.__table__)
DETECTION_LOCK_KEY = 0x63_77_64_74  # "cwdt"


def take_detection_lock(session: Session) -> None:
    """One detection pass at a time across processes: PostgreSQL's advisory lock
    "cwdt", SQLite's write lock (BEGIN IMMEDIATE). Waited for up to the deadline of a
    session of `service.db.waiting_for_locks` (then PassBusy), as `take_pass_lock`
    says: the same bounded wait on both databases."""
    from service.repository.locks import take_pass_lock

    take_pass_lock(session, DETECTION_LOCK_KEY)


def series_keys(session: Session, since_us: int, service: str | None) -> list[tuple[str, str]]:
    query = (
        select(ROLLUPS.c.service, ROLLUPS.c.model)
        .where(ROLLUPS.c.grain_s == 60, ROLLUPS.c.bucket_us >= since_us)
        .distinct()
        .order_by(ROLLUPS.c.service, ROLLUPS.c.model)
    )
    if service is not None:
        query = query.where(ROLLUPS.c.service == service)
    return [(s, m) for s, m in session.execute(query).all()]


def replica_minutes(session: Session, service: str, model: str, since_us: int) -> pl.DataFrame:
    query = (
        select(ROLLUPS.c.bucket_us, ROLLUPS.c.replica, func.sum(ROLLUPS.c.requests))
        .where(
            ROLLUPS.c.grain_s == 60,
            ROLLUPS.c.service == service,
            ROLLUPS.c.model == model,
            ROLLUPS.c.bucket_us >= since_us,
        )
        .group_by(ROLLUPS.c.bucket_us, ROLLUPS.c.replica)
    )
    rows = [tuple(r) for r in session.execute(query).all()]
    return pl.DataFrame(
        rows, schema={"bucket_us": pl.Int64, "replica": pl.Utf8, "requests": pl.Int64}, orient="row"
    )


def replica_first_ts(
    session: Session, service: str, model: str, replica: str, from_us: int
) -> int | None:
    if (ch := clickhouse_of(session)) is not None:
        return ch_reads.replica_ts(ch, service, model, replica, f"ts_us >= {int(from_us)}")
    return session.scalar(
        select(func.min(USAGE.c.ts_us)).where(
            USAGE.c.service == service,
            USAGE.c.model == model,
            USAGE.c.replica == replica,
            USAGE.c.ts_us >= from_us,
        )
    )


def replica_last_ts(
    session: Session, service: str, model: str, replica: str, before_us: int
) -> int | None:
    if (ch := clickhouse_of(session)) is not None:
        return ch_reads.replica_ts(ch, service, model, replica, f"ts_us < {int(before_us)}")
    return session.scalar(
        select(func.max(USAGE.c.ts_us)).where(
            USAGE.c.service == service,
            USAGE.c.model == model,
            USAGE.c.replica == replica,
            USAGE.c.ts_us < before_us,
        )
    )


def deploy_first_minutes(session: Session, since_us: int) -> list[tuple[str, str, int]]:
    """(service, deploy, first minute bucket) from the rollups."""
    query = (
        select(ROLLUPS.c.service, ROLLUPS.c.deploy, func.min(ROLLUPS.c.bucket_us))
        .where(ROLLUPS.c.grain_s == 60, ROLLUPS.c.deploy != "", ROLLUPS.c.bucket_us >= since_us)
        .group_by(ROLLUPS.c.service, ROLLUPS.c.deploy)
    )
    return [(s, d, int(b)) for s, d, b in session.execute(query).all()]


def deploy_first_record(
    session: Session, service: str, deploy: str, from_us: int
) -> tuple[int, str] | None:
    if (ch := clickhouse_of(session)) is not None:
        return ch_reads.deploy_first_record(ch, service, deploy, from_us)
    row = session.execute(
        select(USAGE.c.ts_us, USAGE.c.model)
        .where(USAGE.c.service == service, USAGE.c.deploy == deploy, USAGE.c.ts_us >= from_us)
        .order_by(USAGE.c.ts_us, USAGE.c.id)
        .limit(1)
    ).first()
    return (int(row[0]), str(row[1])) if row else None


def known_deploy_tags(session: Session, service: str) -> set[str]:
    """Tags of the service that already have an inferred deploy event."""
    query = select(ChangeEvent.deploy).where(
        ChangeEvent.service == service,
        ChangeEvent.kind == "deploy",
        ChangeEvent.source == "inferred",
    )
    return {d for d in session.scalars(query).all() if d is not None}


def events_near(
    session: Session, service: str, model: str, from_us: int, to_us: int
) -> Sequence[ChangeEvent]:
    query = select(ChangeEvent).where(
        ChangeEvent.ts_us >= from_us,
        ChangeEvent.ts_us <= to_us,
        (ChangeEvent.service == service) | (ChangeEvent.model == model),
    )
    return session.scalars(query).all()


def segment_variants_per_hour(
    session: Session,
    service: str,
    model: str,
    from_us: int,
    to_us: int,
    group: tuple[str, str] | None = None,
) -> tuple[dict[str, float], float]:
    """Per segment name, the mean number of distinct hashes per hour of traffic, and
    the mean number of requests per hour (to tell a part that became unique from
    one that merely follows the traffic). `group`: only the records whose field
    (`scenario`, `tenant` or `deploy`) has that value."""
    variants: dict[tuple[str, int], set[Any]] = defaultdict(set)
    requests: dict[int, int] = defaultdict(int)
    for ts_us, segments in _segment_rows(session, service, model, from_us, to_us, group):
        hour = ts_us // 3_600_000_000
        requests[hour] += 1
        for segment in segments or ():
            variants[(segment["name"], hour)].add(segment["hash"])
    if not requests:
        return {}, 0.0
    per_name: dict[str, float] = defaultdict(float)
    for (name, _hour), hashes in variants.items():
        per_name[name] += len(hashes)
    hours = len(requests)
    return {name: total / hours for name, total in per_name.items()}, sum(requests.values()) / hours


def _segment_rows(
    session: Session,
    service: str,
    model: str,
    from_us: int,
    to_us: int,
    group: tuple[str, str] | None,
) -> Iterable[tuple[int, Any]]:
    if (ch := clickhouse_of(session)) is not None:
        return ch_reads.segment_rows(ch, service, model, from_us, to_us, group)
    query = select(USAGE.c.ts_us, USAGE.c.segments).where(
        USAGE.c.service == service,
        USAGE.c.model == model,
        USAGE.c.ts_us >= from_us,
        USAGE.c.ts_us < to_us,
        USAGE.c.segments.is_not(None),
    )
    if group is not None:
        query = query.where(USAGE.c[group[0]] == group[1])
    return [(int(ts), segments) for ts, segments in session.execute(query)]


def session_sums(
    session: Session,
    service: str,
    model: str,
    from_us: int,
    to_us: int,
    group: tuple[str, str] | None = None,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Prompt and cached tokens per session (a record without one is its own) of the
    (service, model)'s records in [from_us, to_us); `group`: of the records whose
    field has that value."""
    if (ch := clickhouse_of(session)) is not None:
        return ch_reads.session_sums(ch, service, model, from_us, to_us, group)
    unit = func.coalesce(USAGE.c.session_id, USAGE.c.request_id)
    query = (
        select(func.sum(USAGE.c.prompt_tokens), func.sum(USAGE.c.cached_tokens))
        .where(
            USAGE.c.service == service,
            USAGE.c.model == model,
            USAGE.c.ts_us >= from_us,
            USAGE.c.ts_us < to_us,
        )
        .group_by(unit)
    )
    if group is not None:
        query = query.where(USAGE.c[group[0]] == group[1])
    rows = session.execute(query).all()
    prompt = np.array([float(p or 0) for p, _ in rows], dtype=np.float64)
    cached = np.array([float(c or 0) for _, c in rows], dtype=np.float64)
    return prompt, cached


def find_regression(
    session: Session,
    service: str,
    model: str,
    from_us: int,
    to_us: int,
    group: tuple[str, str] = ("", ""),
) -> Regression | None:
    """The regression of the (service, model) and group ('' '': the whole service)
    whose change is in [from_us, to_us]."""
    query = (
        select(Regression)
        .where(
            Regression.service == service,
            Regression.model == model,
            Regression.group_by == group[0],
            Regression.group_value == group[1],
            Regression.change_ts_us >= from_us,
            Regression.change_ts_us <= to_us,
        )
        .order_by(Regression.id)
        .limit(1)
    )
    return session.scalars(query).first()


def episode_within(
    session: Session,
    service: str,
    model: str,
    group: tuple[str, str],
    cause: str,
    span: tuple[int, int],
) -> Regression | None:
    """The earliest regression of the (service, model) and group with that cause whose
    change is in [span[0], span[1]): the episode a drop over that span is."""
    query = (
        select(Regression)
        .where(
            Regression.service == service,
            Regression.model == model,
            Regression.group_by == group[0],
            Regression.group_value == group[1],
            Regression.cause == cause,
            Regression.change_ts_us >= span[0],
            Regression.change_ts_us < span[1],
        )
        .order_by(Regression.change_ts_us, Regression.id)
        .limit(1)
    )
    return session.scalars(query).first()


def deploy_event(session: Session, service: str, tag: str) -> ChangeEvent | None:
    """The deploy event of a service's tag: a posted one before an inferred one, the
    earliest of either."""
    query = (
        select(ChangeEvent)
        .where(
            ChangeEvent.service == service,
            ChangeEvent.kind == "deploy",
            ChangeEvent.deploy == tag,
        )
        .order_by((ChangeEvent.source != "posted"), ChangeEvent.ts_us, ChangeEvent.id)
        .limit(1)
    )
    return session.scalars(query).first()


def add_regression(session: Session, regression: Regression) -> None:
    session.add(regression)
    session.flush()


def list_regressions(
    session: Session, service: str | None, status: str | None, limit: int
) -> Sequence[Regression]:
    query = select(Regression).order_by(Regression.change_ts_us.desc(), Regression.id.desc())
    if service is not None:
        query = query.where(Regression.service == service)
    if status is not None:
        query = query.where(Regression.status == status)
    return session.scalars(query.limit(limit)).all()


def regressions_overlapping(
    session: Session, service: str | None, model: str | None, from_us: int, to_us: int
) -> Sequence[Regression]:
    """Regressions whose span (change to resolution, or still open) meets
    [from_us, to_us), newest first: however many came before, none is missed."""
    query = select(Regression).where(
        Regression.change_ts_us < to_us,
        (Regression.resolved_at_us.is_(None)) | (Regression.resolved_at_us >= from_us),
    )
    if service is not None:
        query = query.where(Regression.service == service)
    if model is not None:
        query = query.where(Regression.model == model)
    return session.scalars(
        query.order_by(Regression.change_ts_us.desc(), Regression.id.desc())
    ).all()
