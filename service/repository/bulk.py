"""Many rows of a frame into a table in one driver call: the rollups' writes.

SQLAlchemy's `insert(), [dict, ...]` builds and binds a parameter dict per row; for
the chart and group rollups (hundreds of thousands of rows in a first pass over a
day of traffic with groups) that was most of the pass. Here the frame's rows go as
tuples straight to the driver's `executemany` (pysqlite, psycopg), with the
statement SQLAlchemy compiles for the table's columns."""

from typing import Any

import polars as pl
from sqlalchemy import Table
from sqlalchemy.orm import Session


def insert_frame(session: Session, table: Table, frame: pl.DataFrame, columns: list[str]) -> None:
    """Insert the frame's `columns` into the table's same-named columns."""
    if frame.is_empty():
        return
    connection = session.connection()
    statement = table.insert().compile(dialect=connection.dialect, column_keys=columns)
    names = statement.positiontup if statement.positional else None
    order = list(names) if names else columns
    rows: list[Any] = frame.select(order).rows()
    if not statement.positional:
        rows = [dict(zip(order, row, strict=True)) for row in rows]
    connection.exec_driver_sql(str(statement), rows)
