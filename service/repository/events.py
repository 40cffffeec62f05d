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


#: Rows per INSERT / SELECT statement: 11 columns stay far below SQLite's bound
#: on the variables of one statement (32,766).
_EVENT_CHUNK = 500


def insert_events(
    session: Session, rows: Sequence[dict[str, Any]]
) -> list[tuple[ChangeEvent, bool]]:
    """Store each event unless one with its dedupe_key exists; (event, created) per
    row, in order (a row repeated in `rows` is created once). A statement per 500
    rows, not two per row: a backfill of thousands of events holds SQLite's write
    lock for a fraction of a second."""
    dialect = session.get_bind().dialect.name
    insert = pg_insert if dialect == "postgresql" else sqlite_insert
    created: set[str] = set()
    unique = list({row["dedupe_key"]: row for row in rows}.values())
    for start in range(0, len(unique), _EVENT_CHUNK):
        stmt = (
            insert(EVENTS_TABLE)
            .values(unique[start : start + _EVENT_CHUNK])
            .on_conflict_do_nothing(index_elements=["dedupe_key"])
            .returning(EVENTS_TABLE.c.dedupe_key)
        )
        # RETURNING, not rowcount: psycopg reports -1 (truthy) for a skipped insert.
        created.update(session.connection().execute(stmt).scalars())
    stored: dict[str, ChangeEvent] = {}
    keys = [row["dedupe_key"] for row in unique]
    for start in range(0, len(keys), _EVENT_CHUNK):
        query = select(ChangeEvent).where(
            ChangeEvent.dedupe_key.in_(keys[start : start + _EVENT_CHUNK])
        )
        stored.update((event.dedupe_key, event) for event in session.scalars(query))
    answer = []
    for row in rows:
        key = row["dedupe_key"]
        answer.append((stored[key], key in created))
        created.discard(key)  # a repeat within `rows` is not created again
    return answer


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
