"""The rejected store: a refused body is kept as sent with its (bounded) reason, and
listed newest first, page by page, as text or, when it is not text, as base64; of a
body's rejected records a sample of each reason is kept, the rest counted in rows
that say so, within a budget of rows per minute."""

import base64
from typing import Any

import orjson
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.models import RejectedRecord
from service.services.ingestion import ingest_usage
from service.services.rejected import (
    DEFAULT_LIMITS,
    MAX_REASON_CHARS,
    RejectedLimits,
    keep_rejected_body,
    list_rejected,
    rejected_to_json,
)

RECEIVED_US = 1_764_399_600_000_000


def test_a_kept_body_is_listed_newest_first_and_paged(session: Session) -> None:
    for i in range(3):
        keep_rejected_body(session, "events", b"body %d" % i, f"reason {i}", RECEIVED_US + i)
    newest = list_rejected(session, 2, None)
    assert [row.reason for row in newest] == ["reason 2", "reason 1"]
    older = list_rejected(session, 10, newest[-1].id)
    assert [row.raw for row in older] == [b"body 0"]


def test_a_body_is_shown_as_text_or_base64_with_its_reason_cut(session: Session) -> None:
    broken_gzip = b"\x1f\x8b\xff\xfe"
    keep_rejected_body(session, "usage", "né".encode(), "bad", RECEIVED_US)
    keep_rejected_body(session, "usage", broken_gzip, "x" * 5000, RECEIVED_US + 1)
    binary, text = (rejected_to_json(row) for row in list_rejected(session, 2, None))
    assert (text["raw"], text["raw_encoding"], text["index"]) == ("né", "utf-8", None)
    assert text["received_at"] == "2025-11-29T07:00:00Z"
    assert base64.b64decode(binary["raw"]) == broken_gzip
    assert binary["raw_encoding"] == "base64"
    assert binary["reason"] == "x" * MAX_REASON_CHARS


# --- what is kept of a body's rejected records (RejectedKeeper) --------------------

LIMITS = RejectedLimits(sample_per_reason=3, reasons_per_body=2, rows_per_minute=100)


def ingest(session: Session, body: bytes, limits: RejectedLimits = LIMITS, at: int = 0) -> Any:
    return ingest_usage(
        session, body, content_encoding=None, max_decompressed_bytes=1 << 26,
        received_us=RECEIVED_US + at, rejected_limits=limits,
    )  # fmt: skip


def kept(session: Session) -> list[tuple[int | None, str, bytes]]:
    rows = session.scalars(select(RejectedRecord).order_by(RejectedRecord.id)).all()
    return [(row.batch_index, row.reason, row.raw) for row in rows]


def test_a_sample_of_each_reason_is_kept_and_the_rest_counted(session: Session) -> None:
    valid = orjson.dumps({"request_id": "ok", "ts": 1_700_000_000, "service": "s",
                          "model": "m", "prompt_tokens": 1})  # fmt: skip
    lines = [b"{}"] * 1000 + [b"[1]"] * 5 + [valid] + [b'{"ts": "x"}', b"not json", b"{}"]
    outcome = ingest(session, b"\n".join(lines))
    assert (outcome.accepted, outcome.rejected) == (1, 1008)
    assert len(outcome.errors) == 100  # the first 100, whatever was kept
    empty = outcome.errors[0]["error"]
    array = "a record must be a JSON object"
    assert kept(session) == [
        (0, empty, b"{}"),
        (1, empty, b"{}"),
        (2, empty, b"{}"),
        (1000, array, b"[1]"),
        (1001, array, b"[1]"),
        (1002, array, b"[1]"),
        (None, f"{empty} [and 998 more records with this reason in this body were not kept]",
         b""),
        (None, f"{array} [and 2 more records with this reason in this body were not kept]", b""),
        (None, "[2 more records of this body, with reasons other than its first 2 distinct "
               "ones, were not kept]", b""),
    ]  # fmt: skip


def test_a_body_within_the_limits_keeps_every_rejected_record(session: Session) -> None:
    outcome = ingest(session, b"{}\n[1]\n{}\n")
    assert outcome.rejected == 3
    assert [(index, raw) for index, _, raw in kept(session)] == [
        (0, b"{}"),
        (1, b"[1]"),
        (2, b"{}"),
    ]


def test_past_the_minutes_budget_a_body_keeps_one_row_counting_its_rejections(
    session: Session,
) -> None:
    limits = RejectedLimits(sample_per_reason=3, reasons_per_body=2, rows_per_minute=8)
    ingest(session, b"{}\n" * 5, limits)  # 3 samples and 1 count: 4 of the 8
    # 6 samples, of which the 4 left fit; the rest are counted in one row.
    ingest(session, b'{"ts": "x"}\n' * 3 + b"{}\n" * 3, limits, at=1)
    outcome = ingest(session, b"{}\n" * 4, limits, at=2)  # the budget is spent
    assert outcome.rejected == 4
    rows = kept(session)
    assert [index for index, _, _ in rows] == [0, 1, 2, None, 0, 1, 2, 3, None, None]
    assert rows[8][1].startswith(
        "[2 rejected records of this body were not kept: the limit of 8 kept rejected rows "
        "a minute was reached] 2x request_id: Field required"
    )
    assert rows[9][1].startswith("[4 rejected records of this body were not kept")
    # The next minute has a budget of its own.
    ingest(session, b"{}\n", limits, at=60_000_000)
    assert kept(session)[-1][0] == 0


def test_a_flood_of_one_bad_line_keeps_a_sample(session: Session) -> None:
    """1,000,000 `{}` lines (a 2,945-byte gzip body) made 1,000,000 rows; here 20,000."""
    outcome = ingest(session, b"{}\n" * 20_000, DEFAULT_LIMITS)
    assert outcome.rejected == 20_000
    rows = kept(session)
    assert len(rows) == DEFAULT_LIMITS.sample_per_reason + 1
    assert rows[-1][1].endswith(
        "[and 19,990 more records with this reason in this body were not kept]"
    )
