import time
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import ValidationError

from service.api.deps import BodyDep, IngestAuth, ReadAuth, ReadSessionDep, SessionDep
from service.api.params import ModelParam, ServiceParam, TimeParam, ToParam, parse_time_param
from service.api.schemas import EVENT_SCHEMA, READ_ERRORS, ErrorAnswer, EventOut, json_body
from service.ingest.records import format_validation_error
from service.services.events import (
    MAX_EVENTS_PER_REQUEST,
    EventIn,
    event_to_json,
    list_events,
    record_events,
)
from service.services.rejected import keep_rejected_body

router = APIRouter(tags=["events"], responses=READ_ERRORS)
EVENTS_ENDPOINT = "events"


@router.post(
    "/v1/events",
    dependencies=[IngestAuth],
    response_model=EventOut | list[EventOut],
    responses={
        400: {"model": ErrorAnswer, "description": "The body is not JSON"},
        413: {"model": ErrorAnswer, "description": "More events than one request takes"},
        422: {"model": ErrorAnswer, "description": "An event is invalid"},
    },
    openapi_extra=json_body(EVENT_SCHEMA, max_items=MAX_EVENTS_PER_REQUEST),
)
def post_events(received: BodyDep, session: SessionDep) -> Any:
    """One event or a JSON array of events. The same event posted twice is stored once."""
    received_us, body = time.time_ns() // 1000, received.data
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return _reject(session, body, received_us, f"body is not JSON: {exc}", 400)
    items = payload if isinstance(payload, list) else [payload]
    if len(items) > MAX_EVENTS_PER_REQUEST:
        reason = f"{len(items):,} events: at most {MAX_EVENTS_PER_REQUEST:,} per request"
        return _reject(session, body, received_us, reason, 413)
    try:
        events = [EventIn.model_validate(item) for item in items]
    except ValidationError as exc:
        return _reject(session, body, received_us, format_validation_error(exc), 422)
    stored = [event_to_json(event) for event, _ in record_events(session, events)]
    return stored if isinstance(payload, list) else stored[0]


def _reject(
    session: SessionDep, body: bytes, received_us: int, reason: str, status: int
) -> JSONResponse:
    keep_rejected_body(session, EVENTS_ENDPOINT, body, reason, received_us)
    return JSONResponse({"error": reason}, status_code=status)


@router.get("/v1/events", dependencies=[ReadAuth], response_model=list[EventOut])
def get_events(
    session: ReadSessionDep,
    service: ServiceParam = None,
    model: ModelParam = None,
    kind: Annotated[str | None, Query(max_length=20, pattern=r"^[a-z_]*$")] = None,
    from_: TimeParam = None,
    to: ToParam = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1000,
) -> list[dict[str, Any]]:
    """Posted and inferred events, newest first."""
    events = list_events(
        session,
        service=service,
        model=model,
        kind=kind,
        from_us=parse_time_param("from", from_),
        to_us=parse_time_param("to", to),
        limit=limit,
    )
    return [event_to_json(e) for e in events]
