"""A process that dies at any point of an insert or a pass loses nothing: after it,
re-posting the same batches (what a log shipper does with a batch it had no answer
for) and running the pass again leave every rollup row equal to a run that never
died (issue 33, defect 1: records kept, their block uses lost for good).

The death is simulated at the client: the k-th statement sent to ClickHouse raises
instead of answering, for every k of the scenario, and an insert that dies writes
half its rows first (a process killed while the server wrote some of an insert's
parts). The relational transaction of the dead request or pass rolls back, as the
database does for a killed process."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from sqlalchemy.orm import Session

from service import migrate
from service.clickhouse import migrate as ch_migrate
from service.clickhouse.client import ClickHouse, connect
from service.db import make_engine, make_sessionmaker
from service.services.analytics_pass import catch_up
from service.settings import Settings
from tests.clickhouse.test_pass import TABLES, ingest, profiled, records, table_rows
from tests.conftest import chdb_dir, drop_database, fresh_database_url, is_postgres_run

__all__ = ["profiled"]  # a fixture, used by name


class Died(RuntimeError):
    """The process died here."""


class Dying:
    """A client whose `at`-th statement (from 0) dies; None: never."""

    def __init__(self, ch: ClickHouse, at: int | None) -> None:
        self.inner, self.at, self.sent = ch, at, 0
        self.database = ch.database

    def _tick(self) -> bool:
        self.sent += 1
        return self.at is not None and self.sent - 1 == self.at

    def command(self, sql: str) -> None:
        if self._tick():
            raise Died(sql[:60])
        self.inner.command(sql)

    def query(self, sql: str, schema: Mapping[str, pl.DataType] | None = None) -> pl.DataFrame:
        if self._tick():
            raise Died(sql[:60])
        return self.inner.query(sql, schema)

    def query_in(
        self, sql: str, values: Sequence[str], schema: Mapping[str, pl.DataType]
    ) -> pl.DataFrame:
        if self._tick():
            raise Died(sql[:60])
        return self.inner.query_in(sql, values, schema)

    def insert(self, table: str, frame: pl.DataFrame) -> None:
        if self._tick():
            self.inner.insert(table, frame.head(frame.height // 2))
            raise Died(f"insert into {table}")
        self.inner.insert(table, frame)

    def version(self) -> tuple[int, ...]:
        return self.inner.version()

    def close(self) -> None:
        self.inner.close()


def scenario() -> list[list[dict[str, Any]]]:
    """Two batches, the second one late and with duplicates, a pass after each."""
    every = sorted(records()[::15], key=lambda r: r["ts"])
    half = len(every) // 2
    return [every[half:], every[:half] + every[-5:]]


def relational_rows(
    session: Session, settings: Settings, batches: list[list[dict[str, Any]]]
) -> dict[str, Any]:
    """Every rollup table's rows after the scenario on the relational deployment."""
    for batch in batches:
        ingest(session, batch)
        catch_up(session, settings)
    return {m.__tablename__: table_rows(session, m) for m in TABLES}


def rows_after_restart(
    engine: Any, ch: ClickHouse, settings: Settings, batches: list[list[dict[str, Any]]]
) -> dict[str, Any]:
    """The scenario again, nothing dying (a restarted process, its shippers
    sending every batch again); every rollup table's rows then. Drops it all."""
    run(make_sessionmaker(engine, ch), settings, batches)
    with make_sessionmaker(engine, ch)() as after:
        rows = {m.__tablename__: table_rows(after, m) for m in TABLES}
    ch.command(f"DROP DATABASE {ch.database}")
    engine.dispose()
    drop_database(settings.database_url)
    return rows


def run(factory: Any, settings: Settings, batches: list[list[dict[str, Any]]]) -> None:
    for batch in batches:
        with factory() as session:
            ingest(session, batch)
            session.commit()
        with factory() as session:
            catch_up(session, settings)
            session.commit()


def deployment(tmp_path: Path, settings: Settings, n: int, url: str) -> tuple[Any, Any, Settings]:
    db = fresh_database_url(tmp_path, f"crash{n}")
    s = settings.model_copy(
        update={"database_url": db, "clickhouse_url": url, "clickhouse_visibility_lag_s": 0.0}
    )
    engine = make_engine(s)
    migrate.upgrade(engine)
    ch = connect(url)
    ch_migrate.upgrade(ch)
    return engine, ch, s


def test_records_without_their_derived_rows_are_counted_in_full(
    tmp_path: Path, session: Session, profiled: Settings
) -> None:
    """What a kill between an insert's parts left when views wrote the block uses:
    records stored, their uses not. The pass derives them: nothing is lost."""
    batch = records()[::5]
    ingest(session, batch)
    catch_up(session, profiled)
    engine, ch, settings = deployment(tmp_path, profiled, 0, f"chdb://{chdb_dir()}?database=lost")
    factory = make_sessionmaker(engine, ch)
    with factory() as ch_session:
        ingest(ch_session, batch)
        ch_session.commit()
    for table in ("block_uses", "session_requests"):
        ch.command(f"TRUNCATE TABLE {table}")
    with factory() as ch_session:
        catch_up(ch_session, settings)
        for model in TABLES:
            assert table_rows(ch_session, model) == table_rows(session, model)
    ch.command(f"DROP DATABASE {ch.database}")
    engine.dispose()
    drop_database(settings.database_url)


@pytest.mark.skipif(is_postgres_run(), reason="the relational database is not the subject")
def test_a_death_anywhere_loses_nothing(
    tmp_path: Path, session: Session, profiled: Settings
) -> None:
    batches = scenario()
    expected = relational_rows(session, profiled, batches)
    at, died = 0, True
    while died:
        url = f"chdb://{chdb_dir()}?database=crash_{at}"
        engine, ch, settings = deployment(tmp_path, profiled, at, url)
        try:
            run(make_sessionmaker(engine, Dying(ch, at)), settings, batches)
            died = False
        except Died:
            pass
        got = rows_after_restart(engine, ch, settings, batches)
        assert got == expected, f"died at statement {at}"
        at += 1
    assert at > 20  # every statement of the scenario was a point of death


@pytest.mark.parametrize("at", [1, 9])
def test_a_death_on_the_server_loses_nothing(
    tmp_path: Path, session: Session, profiled: Settings, clickhouse_server: str, at: int
) -> None:
    """The same on Debian's clickhouse-server: mid-insert (1) and mid-pass (9)."""
    batches = scenario()
    expected = relational_rows(session, profiled, batches)
    engine, ch, settings = deployment(tmp_path, profiled, at, f"{clickhouse_server}crash_{at}")
    with pytest.raises(Died):
        run(make_sessionmaker(engine, Dying(ch, at)), settings, batches)
    assert rows_after_restart(engine, ch, settings, batches) == expected
