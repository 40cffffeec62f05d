"""Change events (contract section 3): deploys, replica counts, config changes, notes."""

import hashlib
import time
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictInt, model_validator
from sqlalchemy.orm import Session

from service import repository
from service.ingest.timestamps import parse_ts
from service.models import ChangeEvent
from service.rfc3339 import us_to_rfc3339

EventKind = Literal["deploy", "replicas", "config", "note"]
#: The field an event of a kind must carry, and what it is.
REQUIRED_BY_KIND: dict[str, tuple[str, str]] = {
    "deploy": ("deploy", "the new release tag"),
    "replicas": ("replicas", "the new replica count"),
}


def _whole(value: Any) -> Any:
    """A whole-number double (`4.0`, as JavaScript writes every number) is the
    integer JSON Schema says it is; strings, booleans and fractions stay refused."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


class EventIn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    ts: Annotated[int, BeforeValidator(parse_ts)]
    service: Annotated[str, Field(min_length=1, max_length=100)]
    kind: EventKind
    model: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    deploy: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    replicas: Annotated[StrictInt, Field(ge=0, le=1_000_000), BeforeValidator(_whole)] | None = None
    description: Annotated[str, Field(max_length=4000)] | None = None

    @model_validator(mode="after")
    def _required_by_kind(self) -> "EventIn":
        needed = REQUIRED_BY_KIND.get(self.kind)
        if needed is not None and getattr(self, needed[0]) is None:
            raise ValueError(f"a {self.kind} event needs `{needed[0]}`, {needed[1]}")
        for name in ("service", "model", "deploy", "description"):
            value = getattr(self, name)
            if value is not None and "\x00" in value:
                raise ValueError(f"{name} must not contain NUL characters")
        return self


#: The columns whose values are an event's identity.
IDENTITY_COLUMNS = (
    "ts_us",
    "service",
    "kind",
    "model",
    "deploy",
    "replicas",
    "description",
    "source",
)


def dedupe_key(fields: dict[str, Any]) -> str:
    """Same content, same key: the event's identity for idempotent posting."""
    identity = {k: fields.get(k) for k in IDENTITY_COLUMNS}
    return hashlib.sha256(orjson.dumps(identity, option=orjson.OPT_SORT_KEYS)).hexdigest()


#: Events one POST /v1/events may carry (a 413 beyond): a backfill of months of
#: deploys fits, and one body stays one short transaction.
MAX_EVENTS_PER_REQUEST = 10_000


def record_event(
    session: Session, event: EventIn, source: str = "posted"
) -> tuple[ChangeEvent, bool]:
    return record_events(session, [event], source)[0]


def record_events(
    session: Session, events: Sequence[EventIn], source: str = "posted"
) -> list[tuple[ChangeEvent, bool]]:
    """Store the events (each once: its content is its identity); (event, created)
    per event, in order."""
    created_us = time.time_ns() // 1000
    rows = []
    for event in events:
        row = {"ts_us": event.ts, **event.model_dump(exclude={"ts"}), "source": source}
        row["dedupe_key"] = dedupe_key(row)
        row["created_us"] = created_us
        rows.append(row)
    return repository.insert_events(session, rows)


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
    """At most `limit` events, posted and inferred, newest first (`GET /v1/events`):
    of the service, model and kind when given, of ts in [from_us, to_us)."""
    return repository.list_events(
        session,
        service=service,
        model=model,
        kind=kind,
        from_us=from_us,
        to_us=to_us,
        limit=limit,
    )


def event_to_json(event: ChangeEvent) -> dict[str, Any]:
    return {
        "id": event.id,
        "ts": us_to_rfc3339(event.ts_us),
        "service": event.service,
        "kind": event.kind,
        "model": event.model,
        "deploy": event.deploy,
        "replicas": event.replicas,
        "description": event.description,
        "source": event.source,
    }
