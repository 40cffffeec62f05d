"""The SQLite insert planner, executed on a real in-memory SQLite database."""

import sqlite3
from typing import Any

import pytest

from service.repository.sqlite_insert import Insert, plan_inserts, runs_by_absent_columns

COLUMNS = ("key", "a", "b", "c")


def execute(plan: list[Insert]) -> tuple[int, list[tuple[Any, ...]]]:
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (key TEXT UNIQUE, a, b, c)")
    inserted = 0
    db.execute("INSERT INTO t VALUES ('stored', 1, 2, 3)")
    for insert in plan:
        run = db.executemany if insert.many else db.execute
        inserted += run(insert.statement, insert.parameters).rowcount
    return inserted, db.execute("SELECT key, a, b, c FROM t ORDER BY rowid").fetchall()[1:]


def rows_of(n: int) -> list[tuple[Any, ...]]:
    """Shapes change every 7 rows: None in b, then none, then in a and c."""
    shapes = [(1, None, 2.5), (1, b"x", "y"), (None, 2, None)]
    return [(f"k{i}", *shapes[(i // 7) % 3]) for i in range(n)]


@pytest.mark.parametrize("n", [0, 1, 9, 10, 11, 100, 250, 1_234])
def test_the_plan_inserts_every_row_exactly_and_in_order(n: int) -> None:
    rows = rows_of(n)
    plan = list(plan_inserts("t", COLUMNS, "key", rows, max_variables=32_766))
    assert execute(plan) == (n, rows)


def test_rows_already_stored_are_skipped_and_not_counted() -> None:
    rows = [("stored", 9, 9, 9), *rows_of(30), ("k3", 0, 0, 0)]
    inserted, stored = execute(list(plan_inserts("t", COLUMNS, "key", rows, 32_766)))
    assert inserted == 30 and stored == rows_of(30)


def test_a_body_of_one_shape_is_few_statements() -> None:
    rows = [(f"k{i}", 1, None, 3) for i in range(1_234)]
    plan = list(plan_inserts("t", COLUMNS, "key", rows, 32_766))
    assert [(i.many, len(i.parameters)) for i in plan] == [(False, 300)] * 12 + [
        (False, 30),
        (False, 30),
        (False, 30),
        (True, 4),
    ]
    assert "b" not in plan[0].statement.split("VALUES")[0]


def test_statements_stay_under_the_variable_limit() -> None:
    """SQLite before 3.32 allows 999 variables a statement."""
    rows = rows_of(2_000)
    plan = list(plan_inserts("t", COLUMNS, "key", rows, max_variables=10))
    assert all(len(i.parameters) <= 10 for i in plan if not i.many)
    assert execute(plan) == (2_000, rows)


def test_runs_split_where_the_absent_positions_change() -> None:
    rows = [("1", "a", None), ("2", "b", None), ("3", None, "v"), ("4", None, None)]
    runs = runs_by_absent_columns(rows)
    assert [(absent, [r[0] for r in run]) for absent, run in runs] == [
        ((2,), ["1", "2"]),
        ((1,), ["3", "4"]),  # "4" is None at 1 too: its None at 2 is bound
    ]


def test_rows_without_any_none_bind_every_column() -> None:
    runs = runs_by_absent_columns([("1", 2), ("3", None), ("5", 6), ("7", None)])
    assert [(absent, len(run)) for absent, run in runs] == [((), 4)]


def test_a_row_without_its_conflict_column_is_refused() -> None:
    with pytest.raises(ValueError, match="key"):
        list(plan_inserts("t", COLUMNS, "key", [(None, 1, 2, 3)], 32_766))
