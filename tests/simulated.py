"""A simulation stored through the ingestion service, in-process (as `POST /v1/usage`
would store it, without HTTP): shared by the tests that need a week of traffic in
their database, and by bench/detection.py."""

import time
from collections.abc import Iterable, Sequence
from typing import Any

import orjson
from sqlalchemy.orm import Session

from service.services.events import EventIn, record_event
from service.services.ingestion import ingest_usage


def load_records(
    session: Session,
    records: Sequence[dict[str, Any]],
    events: Iterable[dict[str, Any]],
    batch: int = 5000,
) -> None:
    """Store a simulation through the ingestion service (as POST /v1/usage would)."""
    for start in range(0, len(records), batch):
        body = b"\n".join(orjson.dumps(r) for r in records[start : start + batch])
        outcome = ingest_usage(
            session,
            body,
            content_encoding=None,
            max_decompressed_bytes=1 << 34,
            received_us=time.time_ns() // 1000,
        )
        if outcome.rejected:
            raise ValueError(f"simulated records rejected: {outcome.errors[:3]}")
    for event in events:
        record_event(session, EventIn.model_validate(event))
