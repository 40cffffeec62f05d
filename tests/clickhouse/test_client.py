"""The HTTP client's wire formats against a real server (Debian's 18.16): what goes
in as TabSeparated comes back as it went, whatever the strings and floats hold."""

from __future__ import annotations

import math
from collections.abc import Iterator

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.clickhouse.client import ClickHouse
from service.tab_separated import tab_separated
from tests.conftest import is_postgres_run

pytestmark = pytest.mark.skipif(is_postgres_run(), reason="no relational database involved")

SCHEMA: dict[str, pl.DataType] = {
    "s": pl.String(),
    "f": pl.Float64(),
    "a": pl.List(pl.Int64()),
    "u": pl.UInt8(),
}


def _odd_table(ch: ClickHouse) -> ClickHouse:
    ch.command(
        "CREATE TABLE IF NOT EXISTS odd (n Int64, s Nullable(String), f Nullable(Float64), "
        "a Array(Int64), u UInt8) ENGINE = Memory"
    )
    return ch


@pytest.fixture
def odd(server: ClickHouse) -> Iterator[ClickHouse]:
    yield _odd_table(server)
    server.command("DROP TABLE odd")


def _round_trip(ch: ClickHouse, frame: pl.DataFrame) -> pl.DataFrame:
    ch.command("TRUNCATE TABLE odd")
    ch.insert("odd", frame.with_row_index("n").with_columns(pl.col("n").cast(pl.Int64)))
    # Floats as text: the JSON answer (a list column) writes NaN and inf as null.
    back = ch.query(
        "SELECT n, s, toString(f) AS f, a, u FROM odd ORDER BY n",
        {"n": pl.Int64(), **SCHEMA, "f": pl.String()},
    )
    return back.drop("n")


def test_odd_values_go_in_exactly(odd: ClickHouse) -> None:
    frame = pl.DataFrame(
        {
            "s": ["a\tb", "x\ny\r", "back\\slash", "\\N", None, "é\"'q", ""],
            "f": [math.nan, math.inf, -math.inf, 1e-300, None, 1.5e20, 0.1],
            "a": [[], [1, -2], [2**63 - 1], [-(2**63)], [], [0], [5]],
            "u": [True, False, True, False, True, False, True],
        }
    )
    back = _round_trip(odd, frame)
    assert back["s"].to_list() == frame["s"].to_list()
    big = "150000000000000000000"
    assert back["f"].to_list() == ["nan", "inf", "-inf", "1e-300", None, big, "0.1"]
    assert back["a"].to_list() == frame["a"].to_list()
    assert back["u"].to_list() == [1, 0, 1, 0, 1, 0, 1]


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(strings=st.lists(st.none() | st.text(), min_size=1, max_size=20))
def test_any_string_goes_in_exactly(odd: ClickHouse, strings: list[str | None]) -> None:
    n = len(strings)
    frame = pl.DataFrame(
        {"s": strings, "f": [0.5] * n, "a": [[1]] * n, "u": [0] * n},
        schema_overrides={"u": pl.UInt8, "s": pl.String},
    )
    assert _round_trip(odd, frame)["s"].to_list() == strings


def test_a_list_of_strings_is_refused() -> None:
    with pytest.raises(TypeError, match="only lists of numbers"):
        tab_separated(pl.DataFrame({"l": [["a"]]}))


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    stored=st.lists(st.text(), min_size=1, max_size=10, unique=True),
    asked=st.lists(st.text(), max_size=10),
)
def test_a_set_of_strings_apart_from_the_statement_finds_exactly(
    odd: ClickHouse, chdb: ClickHouse, stored: list[str], asked: list[str]
) -> None:
    """`query_in` as a server gets it (external data) and in-process (literals)."""
    n = len(stored)
    frame = pl.DataFrame(
        {"s": stored, "f": [0.5] * n, "a": [[1]] * n, "u": [0] * n},
        schema_overrides={"u": pl.UInt8, "s": pl.String},
    )
    asked = [*asked, stored[0]]
    expected = sorted(set(stored) & set(asked))
    for ch in (odd, _odd_table(chdb)):
        ch.command("TRUNCATE TABLE odd")
        ch.insert("odd", frame.with_row_index("n").with_columns(pl.col("n").cast(pl.Int64)))
        found = ch.query_in("SELECT s FROM odd WHERE s IN {values}", asked, {"s": pl.String()})
        assert sorted(found["s"].to_list()) == expected
