"""How a batch of rows goes into SQLite through pysqlite with the least work per row.

On usage rows (22 columns, four indexes), two things cost more than they need to
when each row is its own `executemany` step:

- Every bound value costs pysqlite a call, None more than most (`service.db` says
  why), and a typical usage row has about ten empty optional fields. So each run
  of consecutive rows with the same absent fields goes in with a statement that
  leaves those columns out: they default to NULL without being bound.
- Each executed statement opens and closes a cursor on the table and on every
  index, and ends in a statement halt, per row. One INSERT with many VALUES rows
  pays that once.

Log shippers send bodies of one shape, so a body is one run or a few. Runs, and the
rows in each statement, keep body order, so arrival ids do. The planning is pure:
the caller executes each `Insert` (the service through SQLAlchemy, the bench
through sqlite3 directly) and sums the rowcounts, which count inserted rows only.
"""

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain
from operator import itemgetter
from typing import Any

# Rows per multi-row statement, largest first; the tail goes one row at a time. Each
# size is one cached prepared statement per shape of row.
_ROWS_PER_STATEMENT = (100, 10)
Row = tuple[Any, ...]


@dataclass(frozen=True)
class Insert:
    """One statement to execute: with `many`, `parameters` is a list of rows for
    executemany; otherwise one flat tuple of every row's values."""

    statement: str
    parameters: tuple[Any, ...] | list[Row]
    many: bool


def plan_inserts(
    table: str,
    columns: tuple[str, ...],
    conflict_column: str,
    values: Sequence[Row],
    max_variables: int,
) -> Iterator[Insert]:
    """The statements that insert `values` (tuples in `columns` order) in order,
    skipping rows whose `conflict_column` is already stored. `max_variables` is the
    connection's SQLITE_LIMIT_VARIABLE_NUMBER (999 before SQLite 3.32)."""
    for absent, run in runs_by_absent_columns(values):
        shape = _shape(table, columns, conflict_column, absent)
        rows = list(map(shape.pick, run))
        start = 0
        for size in shape.sizes(max_variables):
            end = start + (len(rows) - start) // size * size
            statement = shape.statement(size)
            for first in range(start, end, size):
                flat = tuple(chain.from_iterable(rows[first : first + size]))
                yield Insert(statement, flat, many=False)
            start = end
        if start < len(rows):
            yield Insert(shape.statement(1), rows[start:], many=True)


def runs_by_absent_columns(values: Sequence[Row]) -> list[tuple[tuple[int, ...], list[Row]]]:
    """Consecutive rows grouped so that every row of a run is None at the run's
    absent positions (those of its first row). A later row may hold more Nones: they
    are bound, as NULL, which is only slower. The test is one C-level itemgetter
    compared with a tuple of Nones, by identity; counting a row's Nones instead cost
    a rich comparison per present value."""
    runs: list[tuple[tuple[int, ...], list[Row]]] = []
    current: list[Row] = []
    absent_of: Callable[[Row], Any] = _nothing
    expected: Any = _NEVER
    for row in values:
        if absent_of(row) != expected:
            absent = tuple(i for i, value in enumerate(row) if value is None)
            absent_of = itemgetter(*absent) if absent else _nothing
            expected = absent_of((None,) * len(row))
            current = []
            runs.append((absent, current))
        current.append(row)
    return runs


_NEVER = object()  # no absent_of returns it: the first row starts a run


def _nothing(_row: Row) -> None:
    return None


@dataclass(frozen=True)
class _Shape:
    """The present columns of a run: what picks their values from a full row, and
    the INSERT of `n` rows of them."""

    table: str
    present: tuple[str, ...]
    conflict_column: str
    pick: Callable[[Row], Row]

    def sizes(self, max_variables: int) -> tuple[int, ...]:
        fitting = max(1, max_variables // len(self.present))
        return tuple(dict.fromkeys(min(size, fitting) for size in _ROWS_PER_STATEMENT))

    def statement(self, rows: int) -> str:
        return _statement(self.table, self.present, self.conflict_column, rows)


@lru_cache(maxsize=256)
def _shape(
    table: str, columns: tuple[str, ...], conflict_column: str, absent: tuple[int, ...]
) -> _Shape:
    positions = [i for i in range(len(columns)) if i not in absent]
    if conflict_column not in (present := tuple(columns[i] for i in positions)):
        raise ValueError(f"{conflict_column} is None in a row")
    # More than one position: itemgetter then always returns a tuple.
    pick = itemgetter(*positions) if len(positions) > 1 else lambda row: (row[positions[0]],)
    return _Shape(table, present, conflict_column, pick)


@lru_cache(maxsize=256)
def _statement(table: str, present: tuple[str, ...], conflict_column: str, rows: int) -> str:
    row = f"({', '.join('?' * len(present))})"
    return (
        f"INSERT INTO {table} ({', '.join(present)}) VALUES {', '.join([row] * rows)} "
        f"ON CONFLICT ({conflict_column}) DO NOTHING"
    )
