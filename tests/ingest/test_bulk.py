"""The whole-body NDJSON path (`service.ingest.bulk`) against the per-line path.

The property: when `bulk_values` takes a body, every line of it is a record the
per-line reference accepts, and the rows are that reference's rows (by repr, in
body order); when it declines, the per-line path decides, so nothing else counts."""

import random
from typing import Any

import orjson
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from service import repository
from service.ingest.body import UndecodableBody
from service.ingest.bulk import CHUNK_BYTES, NotBulk, bulk_rows
from tests.ingest.test_fast import (
    RECEIVED_US,
    SETTINGS,
    lines,
    reference_split,
    reference_validate,
    to_line,
    valid_records,
)


def bulk_values(body: bytes, received_us: int) -> list[tuple[Any, ...]] | None:
    """All the rows `bulk_rows` gives, or None when it declines the body, up front
    or half-way (the service then takes the per-line path)."""
    rows = bulk_rows(body, received_us)
    if rows is None:
        return None
    try:
        return list(rows)
    except NotBulk:
        return None


def reference_rows(body: bytes) -> list[tuple[Any, ...]] | None:
    """The rows the per-line reference stores for the body, as `usage_row_values`
    tuples, or None when it rejects anything (or the whole body)."""
    try:
        items = reference_split(body)
    except UndecodableBody:
        return None
    rows = []
    for _, value, _, error in items:
        row, _ = (None, error) if error is not None else reference_validate(value)
        if row is None:
            return None
        rows.append(row)
    return rows


def assert_bulk_agrees(body: bytes) -> list[tuple[Any, ...]] | None:
    bulk = bulk_values(body, RECEIVED_US)
    expected = reference_rows(body)
    if bulk is not None:
        assert expected is not None, "bulk took a body the per-line path rejects part of"
        assert [repr(v) for v in bulk] == [repr(v) for v in expected]
    return bulk


@SETTINGS
@given(st.lists(lines, min_size=1, max_size=4), st.booleans())
def test_any_body_gives_the_per_line_rows(body_lines: list[bytes], crlf: bool) -> None:
    bulk = assert_bulk_agrees((b"\r\n" if crlf else b"\n").join(body_lines))
    event("bulk" if bulk is not None else "per line")


@SETTINGS
@given(
    st.lists(valid_records(), min_size=1, max_size=5),
    st.randoms(use_true_random=True),
    st.sampled_from([b"\n", b"\r\n"]),
)
def test_valid_bodies_take_the_bulk_path(
    records: list[dict[str, Any]], rnd: random.Random, newline: bytes
) -> None:
    # Lines as written by to_line (escapes, inner whitespace), less the whitespace
    # around them, which the bulk path leaves to the per-line path.
    stripped = [to_line(r, rnd, duplicates=False).strip(b" \t\r\n") for r in records]
    assert assert_bulk_agrees(newline.join(stripped) + newline) is not None


GOOD = b'{"request_id": "r%d", "ts": 1714564800, "service": "s", "model": "m", "prompt_tokens": 5'


def good(i: int, extra: bytes = b"") -> bytes:
    return GOOD % i + extra + b"}"


@pytest.mark.parametrize(
    "body",
    [
        # A value across two lines and two values on one: as many values as lines,
        # but no line is a record on its own.
        good(1, b', "usage": [[1') + b"\n2]]}\n" + good(2) + b" " + good(3),
        good(1, b', "segments": [{"name": "a", "hash": 1, "tokens": 1}')
        + b",\n"
        + b'{"name": "b", "hash": 2, "tokens": 1}]}\n'
        + good(2),
        good(1) + b"\n\n" + good(2),  # a blank line
        good(1) + b"\n  " + good(2),  # an indented line
        good(1) + b"\n" + good(2) + b"\n[1]",  # a line that is not an object
        good(1) + b"\n" + good(2) + b"\nnot json}",
        good(1) + b"\n" + good(2, b', "cached_tokens": 6'),  # a record pydantic refuses
        good(1) + b"\n" + good(2, b', "replica": "a\\u0000b"'),  # NUL
        good(1) + b"\n" + good(2, b', "extra": 1'),  # unknown field: the dict path
        good(1) + b"\r" + good(2),  # a bare CR is no line break
        b'{\n  "request_id": "r1", "ts": 1, "service": "s", "model": "m", "prompt_tokens": 5\n}',
    ],
)
def test_bodies_the_bulk_path_leaves_to_the_per_line_path(body: bytes) -> None:
    assert bulk_values(body, RECEIVED_US) is None
    assert_bulk_agrees(body)


def test_an_escaped_backslash_before_u0000_is_no_nul() -> None:
    body = good(1, b', "replica": "a\\\\u0000"') + b"\n" + good(2)
    rows = assert_bulk_agrees(body)
    assert rows is not None and rows[0][repository.USAGE_COLUMNS.index("replica")] == "a\\u0000"


def test_raw_control_characters_are_never_taken() -> None:
    for char in (b"\x00", b"\n", b"\x1f"):
        body = good(1, b', "replica": "a' + char + b'b"') + b"\n" + good(2)
        assert bulk_values(body, RECEIVED_US) is None


def test_gzip_bom_and_surrounding_whitespace_like_the_per_line_path() -> None:
    body = b" \r\n\xef\xbb\xbf\n" + good(1) + b"\r\n" + good(2) + b"\r\n\r\n  "
    rows = assert_bulk_agrees(body)
    assert rows is not None and [r[0] for r in rows] == ["r1", "r2"]


def test_one_record_is_the_single_object_body() -> None:
    line = orjson.dumps(
        {"request_id": "x", "ts": "2025-11-29T10:00:00Z", "service": "s", "model": "m",
         "usage": {"prompt_tokens": 7, "prompt_tokens_details": {"cached_tokens": 3}},
         "segments": [{"name": "sys", "hash": "h", "tokens": 3}], "attributes": {"a": 1}}
    )  # fmt: skip
    rows = assert_bulk_agrees(line)
    assert rows is not None and len(rows) == 1


def many_chunks() -> list[bytes]:
    """Enough lines for four chunks and a part."""
    return [good(i) for i in range(4 * CHUNK_BYTES // len(good(0)) + 7)]


def test_a_body_of_many_chunks_gives_every_row_in_order() -> None:
    body_lines = many_chunks()
    for newline in (b"\n", b"\r\n"):
        rows = assert_bulk_agrees(newline.join(body_lines) + newline)
        assert rows is not None and [r[0] for r in rows] == [
            f"r{i}" for i in range(len(body_lines))
        ]


def test_a_line_that_does_not_decode_in_a_later_chunk_stops_the_rows_there() -> None:
    """The first chunk decodes before `bulk_rows` answers; a later one only when its
    rows are asked for, so the caller has had the earlier rows when NotBulk comes."""
    body_lines = many_chunks()
    body_lines[-3] = b'{"request_id": "r-bad", oops}'
    body = b"\n".join(body_lines)
    rows = bulk_rows(body, RECEIVED_US)
    assert rows is not None
    taken = []
    with pytest.raises(NotBulk):
        for row in rows:
            taken.append(row[0])
    assert CHUNK_BYTES // len(good(0)) <= len(taken) < len(body_lines) - 3
    assert taken == [f"r{i}" for i in range(len(taken))]
    assert bulk_values(body, RECEIVED_US) is None
    assert_bulk_agrees(body)
