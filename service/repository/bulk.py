"""Many rows of a frame into a table in one driver call: the rollups' writes.

SQLAlchemy's `insert(), [dict, ...]` builds and binds a parameter dict per row; for
the chart and group rollups on SQLite (hundreds of thousands of rows in a first pass
over a day of traffic with groups) that was most of the pass. There the frame's rows
go as tuples straight to pysqlite's `executemany`, with the statement SQLAlchemy
compiles for the table's columns. On PostgreSQL they go by COPY, in the session's
transaction: SQLAlchemy's multi-row INSERTs cost 60 us a row there (14 s of a 20 s
pass over 200,000 records was writing its rollups), COPY's rows a few."""

from typing import Any

import polars as pl
from sqlalchemy import Table
from sqlalchemy.orm import Session

from service.tab_separated import tab_separated

#: Rows of COPY's text built at a time: the text of a whole pass's rollups is not
#: held at once.
_COPY_ROWS = 50_000


def insert_frame(session: Session, table: Table, frame: pl.DataFrame, columns: list[str]) -> None:
    """Insert the frame's `columns` into the table's same-named columns."""
    if frame.is_empty():
        return
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        _copy(connection, table, frame.select(columns))
        return
    if connection.dialect.name != "sqlite":
        session.execute(table.insert(), frame.select(columns).to_dicts())
        return
    statement = table.insert().compile(dialect=connection.dialect, column_keys=columns)
    order = list(statement.positiontup or columns)
    rows: list[Any] = frame.select(order).rows()
    connection.exec_driver_sql(str(statement), rows)


def _copy(connection: Any, table: Table, frame: pl.DataFrame) -> None:
    """COPY the frame's rows into the table's same-named columns (psycopg 3), as
    one block of COPY's text built by Polars (`service.tab_separated`): a Python
    `write_row` per row was most of the write."""
    driver = connection.connection.driver_connection
    names = ", ".join(f'"{c}"' for c in frame.columns)
    with (
        driver.cursor() as cursor,
        cursor.copy(f'COPY "{table.name}" ({names}) FROM STDIN') as copy,
    ):
        for start in range(0, frame.height, _COPY_ROWS):
            copy.write(tab_separated(frame.slice(start, _COPY_ROWS)))
