"""Many rows of a frame into a table in one driver call: the rollups' writes.

SQLAlchemy's `insert(), [dict, ...]` builds and binds a parameter dict per row; for
the chart and group rollups on SQLite (hundreds of thousands of rows in a first pass
over a day of traffic with groups) that was most of the pass. There the frame's rows
go as tuples straight to pysqlite's `executemany`, with the statement SQLAlchemy
compiles for the table's columns. PostgreSQL keeps SQLAlchemy's path: it batches the
rows into multi-row statements, which psycopg's `executemany` would not."""

from typing import Any

import polars as pl
from sqlalchemy import Table
from sqlalchemy.orm import Session


def insert_frame(session: Session, table: Table, frame: pl.DataFrame, columns: list[str]) -> None:
    """Insert the frame's `columns` into the table's same-named columns."""
    if frame.is_empty():
        return
    connection = session.connection()
    if connection.dialect.name != "sqlite":
        # SQLAlchemy batches these into multi-row INSERTs ("insertmanyvalues"), where
        # psycopg's own executemany would send a statement per row.
        session.execute(table.insert(), frame.select(columns).to_dicts())
        return
    statement = table.insert().compile(dialect=connection.dialect, column_keys=columns)
    order = list(statement.positiontup or columns)
    rows: list[Any] = frame.select(order).rows()
    connection.exec_driver_sql(str(statement), rows)
