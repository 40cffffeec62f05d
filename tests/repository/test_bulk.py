"""The rollups' bulk write on the real database (executemany on SQLite, COPY's
text on PostgreSQL): every value reads back as it went in, odd strings, bytes and
floats included."""

from __future__ import annotations

import math
from typing import Any

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Boolean, Column, Float, Integer, LargeBinary, MetaData, String, Table
from sqlalchemy.orm import Session

from service.repository.bulk import insert_frame

PROBE = Table(
    "bulk_probe",
    MetaData(),
    Column("n", Integer, primary_key=True),
    Column("s", String),
    Column("b", LargeBinary),
    Column("f", Float),
    Column("t", Boolean),
)
COLUMNS = ["n", "s", "b", "f", "t"]


def _round_trip(session: Session, rows: dict[str, list[Any]]) -> list[tuple[Any, ...]]:
    connection = session.connection()
    PROBE.drop(connection, checkfirst=True)
    PROBE.create(connection)
    frame = pl.DataFrame(
        {"n": range(len(rows["s"])), **rows},
        schema={"n": pl.Int64, "s": pl.String, "b": pl.Binary, "f": pl.Float64, "t": pl.Boolean},
    )
    insert_frame(session, PROBE, frame, COLUMNS)
    back = connection.execute(PROBE.select().order_by(PROBE.c.n)).all()
    PROBE.drop(connection)
    return [tuple(row)[1:] for row in back]


def test_odd_values_read_back_exactly(session: Session) -> None:
    strings = ["a\tb", "x\ny\r", "back\\slash", "\\N", "\\.", None, "é\"'q", ""]
    blobs = [b"\x00\x01", b"\\", b"\t\n", b"", None, b"\xff" * 10, b"N", b"x"]
    floats = [math.inf, -math.inf, 1e-300, None, 1.5e20, 0.1, -0.0, 123456789.123]
    flags = [True, False, None, True, False, True, False, True]
    back = _round_trip(session, {"s": strings, "b": blobs, "f": floats, "t": flags})
    assert [r[0] for r in back] == strings
    assert [None if r[1] is None else bytes(r[1]) for r in back] == blobs
    assert [r[2] for r in back] == floats
    assert [r[3] for r in back] == flags
    nan = _round_trip(session, {"s": ["n"], "b": [b""], "f": [math.nan], "t": [True]})[0][2]
    if session.connection().dialect.name == "postgresql":  # SQLite stores NaN as null
        assert math.isnan(nan)


#: The characters COPY's text escapes (and the two of its end marker, `\.`), drawn
#: often: a text of arbitrary characters rarely holds them.
_ESCAPED = st.sampled_from(["\\", "\t", "\n", "\r", ".", "N"])


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    strings=st.lists(
        st.none()
        | st.text(_ESCAPED | st.characters(exclude_categories=["Cs"], exclude_characters="\x00")),
        min_size=1,
        max_size=20,
    )
)
def test_any_string_reads_back_exactly(session: Session, strings: list[str | None]) -> None:
    n = len(strings)
    back = _round_trip(session, {"s": strings, "b": [b"x"] * n, "f": [0.5] * n, "t": [True] * n})
    assert [r[0] for r in back] == strings
