"""services.ingestion on the real database: the bulk path streams rows into the
insert, so a record it declines half-way must leave nothing of the body stored
before the lines decide, and the counts must add up."""

from typing import Any

import orjson
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.models import RejectedRecord, UsageRecord
from service.services.ingestion import IngestOutcome, ingest_usage


def line(i: int, **fields: Any) -> bytes:
    record = {"request_id": f"ing-{i:04d}", "ts": 1_700_000_000 + i, "service": "s",
              "model": "m", "prompt_tokens": 100, "block_size": 16,
              "block_hashes": [i, i + 1]}  # fmt: skip
    return orjson.dumps({**record, **fields})


def ingest(session: Session, lines: list[bytes]) -> IngestOutcome:
    return ingest_usage(
        session,
        b"\n".join(lines) + b"\n",
        content_encoding=None,
        max_decompressed_bytes=1 << 26,
        received_us=1_764_410_400_000_000,  # 2025-11-29, after every record
    )


def stored_ids(session: Session) -> list[str]:
    return list(session.scalars(select(UsageRecord.request_id).order_by(UsageRecord.id)))


def test_a_record_declined_half_way_leaves_only_the_valid_lines_stored(session: Session) -> None:
    """Line 250 (cached above prompt) passes the framing and decoding checks, so the
    bulk path has already handed the database 249 rows when it meets it."""
    lines = [line(i) for i in range(300)]
    lines[250] = line(250, cached_tokens=101)
    outcome = ingest(session, lines)
    assert (outcome.accepted, outcome.duplicates, outcome.rejected) == (299, 0, 1)
    assert [e["index"] for e in outcome.errors] == [250]
    assert stored_ids(session) == [f"ing-{i:04d}" for i in range(300) if i != 250]
    rejected = session.scalars(select(RejectedRecord.raw)).all()
    assert rejected == [lines[250]]


def test_a_repeat_within_the_body_is_one_duplicate(session: Session) -> None:
    lines = [line(i) for i in range(20)] + [line(3, prompt_tokens=5)]
    outcome = ingest(session, lines)
    assert (outcome.accepted, outcome.duplicates, outcome.rejected) == (20, 1, 0)
    stored = session.scalars(
        select(UsageRecord.prompt_tokens).where(UsageRecord.request_id == "ing-0003")
    ).all()
    assert stored == [100]  # the first of the two


def test_a_body_partly_stored_already_adds_only_the_new_records(session: Session) -> None:
    assert ingest(session, [line(i) for i in range(0, 40, 2)]).accepted == 20
    outcome = ingest(session, [line(i) for i in range(40)])
    assert (outcome.accepted, outcome.duplicates) == (20, 20)
    assert sorted(stored_ids(session)) == [f"ing-{i:04d}" for i in range(40)]
    assert stored_ids(session)[20:] == [f"ing-{i:04d}" for i in range(1, 40, 2)]


def test_a_line_that_does_not_decode_late_in_a_large_body_leaves_the_lines_to_decide(
    session: Session,
) -> None:
    """The bulk path decodes a large body chunk by chunk while it stores: line 900 of
    1,000 (about 150 KiB) is met after several chunks went to the database. One
    line is not JSON, which the lines reject; one has an unknown field, which the
    bulk decoder refuses and the lines accept."""
    lines = [line(i) for i in range(1000)]
    lines[900] = b'{"request_id": "ing-0900", oops}'
    lines[950] = line(950, unknown_field=1)
    outcome = ingest(session, lines)
    assert (outcome.accepted, outcome.duplicates, outcome.rejected) == (999, 0, 1)
    assert [e["index"] for e in outcome.errors] == [900]
    assert stored_ids(session) == [f"ing-{i:04d}" for i in range(1000) if i != 900]
    assert session.scalars(select(RejectedRecord.raw)).all() == [lines[900]]
