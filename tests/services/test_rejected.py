"""The rejected store: a refused body is kept as sent with its (bounded) reason, and
listed newest first, page by page, as text or, when it is not text, as base64."""

import base64

from sqlalchemy.orm import Session

from service.services.rejected import (
    MAX_REASON_CHARS,
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
