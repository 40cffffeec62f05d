"""The alerts' queries: the outbox rows and the per-webhook send slot. Callers pass a
session and own the transaction; nothing here commits."""

from collections.abc import Collection, Sequence
from typing import Any, cast

from sqlalchemy import ColumnElement, Insert, Table, and_, case, exists, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session, aliased

from service.models import Alert, AlertWebhook, Regression

ALERTS = cast(Table, Alert.__table__)
WEBHOOKS = cast(Table, AlertWebhook.__table__)

PENDING, SENDING, SENT, FAILED, NO_WEBHOOK = "pending", "sending", "sent", "failed", "no_webhook"
STATES = (PENDING, SENDING, SENT, FAILED, NO_WEBHOOK)
# Waiting for a first or another attempt (no_webhook: until a webhook is configured).
WAITING = (PENDING, NO_WEBHOOK)
FINAL = (SENT, FAILED)


def _insert_or_ignore(
    session: Session, table: Table, values: dict[str, Any], keys: list[str]
) -> Insert:
    if session.get_bind().dialect.name == "postgresql":
        return pg_insert(table).values(**values).on_conflict_do_nothing(index_elements=keys)
    return sqlite_insert(table).values(**values).on_conflict_do_nothing(index_elements=keys)


def add_alert(session: Session, regression_id: int, kind: str, now_us: int) -> bool:
    """Queue one alert unless this (regression, kind) already has one, also when a
    concurrent detection pass just queued it: the unique pair decides. True if new."""
    values: dict[str, Any] = {
        "regression_id": regression_id,
        "kind": kind,
        "state": PENDING,
        "created_us": now_us,
        "updated_us": now_us,
        "next_attempt_us": now_us,
        "attempts": 0,
        "errors": 0,
    }
    stmt = _insert_or_ignore(session, ALERTS, values, ["regression_id", "kind"])
    return bool(session.connection().execute(stmt).rowcount)


def regressions_with_alert(
    session: Session, regression_ids: Collection[int], kind: str
) -> set[int]:
    if not regression_ids:
        return set()
    query = select(Alert.regression_id).where(
        Alert.kind == kind, Alert.regression_id.in_(list(regression_ids))
    )
    return set(session.scalars(query).all())


def mark_waiting_for_webhook(session: Session, now_us: int) -> int:
    """No webhook configured: pending alerts say so and stay queued."""
    result = session.execute(
        update(Alert).where(Alert.state == PENDING).values(state=NO_WEBHOOK, updated_us=now_us)
    )
    return int(result.rowcount)  # type: ignore[attr-defined]


def _due(alert: type[Alert], now_us: int) -> ColumnElement[bool]:
    """Claimable now: waiting and due, or claimed by a worker whose lease ran out."""
    return or_(
        and_(alert.state.in_(WAITING), alert.next_attempt_us <= now_us),
        and_(alert.state == SENDING, alert.lease_until_us <= now_us),
    )


def _claimable(now_us: int) -> ColumnElement[bool]:
    """Due, and for a `resolved` alert, its `opened` alert is done or due with it:
    Slack must never show a resolution before the regression's opening."""
    opened = aliased(Alert)
    blocking_opened = exists().where(
        opened.regression_id == Alert.regression_id,
        opened.kind == "opened",
        opened.state.not_in(FINAL),
        ~_due(opened, now_us),
    )
    return and_(_due(Alert, now_us), or_(Alert.kind != "resolved", ~blocking_opened))


def any_due(session: Session, now_us: int) -> bool:
    return session.scalar(select(exists().where(_claimable(now_us)))) or False


def claim_due(
    session: Session, now_us: int, limit: int, claim: str, lease_until_us: int
) -> list[Alert]:
    """Mark up to `limit` due alerts `sending` under the lease token `claim`, oldest
    first. PostgreSQL: rows another worker is claiming are skipped, not waited for
    (FOR UPDATE SKIP LOCKED); SQLite has no row locks, but its write lock, taken at
    BEGIN IMMEDIATE, makes the whole claim one at a time."""
    query = (
        select(Alert)
        .where(_claimable(now_us))
        .order_by(Alert.id)
        .limit(limit)
        .with_for_update(skip_locked=True, of=Alert)
    )
    alerts = list(session.scalars(query).all())
    for alert in alerts:
        alert.state = SENDING
        alert.claim = claim
        alert.lease_until_us = lease_until_us
        alert.attempts += 1
        alert.updated_us = now_us
    session.flush()
    return alerts


def claimed(session: Session, claim: str) -> list[Alert]:
    """The alerts still held under `claim` (none when the lease ran out and another
    worker took them over)."""
    query = (
        select(Alert)
        .where(Alert.claim == claim, Alert.state == SENDING)
        .order_by(Alert.id)
        .with_for_update()
    )
    return list(session.scalars(query).all())


def regressions(session: Session, ids: Collection[int]) -> dict[int, Regression]:
    if not ids:
        return {}
    rows = session.scalars(select(Regression).where(Regression.id.in_(list(ids)))).all()
    return {r.id: r for r in rows}


def lock_webhook(session: Session, key: str) -> int:
    """The webhook's next free send time, its row locked until the transaction ends
    so that workers take send slots one at a time."""
    session.execute(_insert_or_ignore(session, WEBHOOKS, {"key": key, "next_send_us": 0}, ["key"]))
    next_send = session.scalar(
        select(AlertWebhook.next_send_us).where(AlertWebhook.key == key).with_for_update()
    )
    return int(next_send or 0)


def hold_webhook_until(session: Session, key: str, until_us: int) -> None:
    """No message to this webhook before `until_us` (never moves the time earlier)."""
    column = AlertWebhook.next_send_us
    session.execute(
        update(AlertWebhook)
        .where(AlertWebhook.key == key)
        .values(next_send_us=case((column < until_us, until_us), else_=column))
    )


def release_webhook(session: Session, key: str, free_at_us: int) -> None:
    """The message in flight is done: the next may go at `free_at_us`."""
    session.execute(
        update(AlertWebhook).where(AlertWebhook.key == key).values(next_send_us=free_at_us)
    )


def list_alerts(
    session: Session,
    *,
    state: str | None = None,
    kind: str | None = None,
    regression_id: int | None = None,
    service: str | None = None,
    limit: int = 1000,
) -> Sequence[tuple[Alert, Regression]]:
    """Newest first, each with its regression."""
    query = (
        select(Alert, Regression)
        .join(Regression, Regression.id == Alert.regression_id)
        .order_by(Alert.id.desc())
        .limit(limit)
    )
    if state is not None:
        query = query.where(Alert.state == state)
    if kind is not None:
        query = query.where(Alert.kind == kind)
    if regression_id is not None:
        query = query.where(Alert.regression_id == regression_id)
    if service is not None:
        query = query.where(Regression.service == service)
    return [(a, r) for a, r in session.execute(query).all()]
