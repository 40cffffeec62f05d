"""Change events and API tokens. Callers pass a session; nothing here commits."""

from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import Table, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from service.models import (
    ApiToken,
    ChangeEvent,
)

EVENTS_TABLE = cast(Table, ChangeEvent.__table__)


def insert_event(session: Session, row: dict[str, Any]) -> tuple[ChangeEvent, bool]:
    """Store an event unless one with the same dedupe_key exists; (event, created)."""
    dialect = session.get_bind().dialect.name
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    stmt = (
        insert(EVENTS_TABLE)
        .values(**row)
        .on_conflict_do_nothing(index_elements=["dedupe_key"])
        .returning(EVENTS_TABLE.c.id)
    )
    # RETURNING, not rowcount: psycopg reports -1 (truthy) for a skipped insert.
    created = session.connection().execute(stmt).first() is not None
    event = session.scalars(
        select(ChangeEvent).where(ChangeEvent.dedupe_key == row["dedupe_key"])
    ).one()
    return event, created


def list_events(
    session: Session,
    *,
    service: str | None,
    model: str | None,
    kind: str | None,
    from_us: int | None,
    to_us: int | None,
    limit: int,
) -> Sequence[ChangeEvent]:
    query = select(ChangeEvent)
    if service is not None:
        query = query.where(ChangeEvent.service == service)
    if model is not None:
        query = query.where(ChangeEvent.model == model)
    if kind is not None:
        query = query.where(ChangeEvent.kind == kind)
    if from_us is not None:
        query = query.where(ChangeEvent.ts_us >= from_us)
    if to_us is not None:
        query = query.where(ChangeEvent.ts_us < to_us)
    query = query.order_by(ChangeEvent.ts_us.desc(), ChangeEvent.id.desc()).limit(limit)
    return session.scalars(query).all()


def add_token(session: Session, token: ApiToken) -> None:
    session.add(token)
    session.flush()


def find_token(session: Session, token_hash: str) -> ApiToken | None:
    return session.scalars(
        select(ApiToken).where(ApiToken.token_hash == token_hash, ApiToken.revoked.is_(False))
    ).one_or_none()
