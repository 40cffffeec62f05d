"""The same SQL on a real clickhouse-server: Debian's package, ClickHouse 18.16
(2018), over HTTP. The pass's values equal the relational pass's there too, and
the tables, views and migrations run on it unchanged."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings

from service.analytics.session_report import CALL_COLUMNS, empty_calls
from service.clickhouse import migrate, reads
from service.clickhouse.client import ClickHouse
from service.repository.sessions import CallFilter
from tests.analytics.conftest import mooncake_frame
from tests.analytics.reference import Record
from tests.analytics.test_properties import WINDOWS, traffic
from tests.clickhouse.frames import insert_frame
from tests.clickhouse.test_analytics import assert_same, clickhouse_results
from tests.conftest import is_postgres_run

#: The relational database plays no part here: one of `make test`'s two runs is enough.
pytestmark = pytest.mark.skipif(is_postgres_run(), reason="no relational database involved")


def test_it_is_the_old_server(server: ClickHouse) -> None:
    """What this file proves is compatibility with the oldest server in reach."""
    assert server.version() < (19,)


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(records=traffic(), window_s=WINDOWS)
def test_equals_the_relational_pass(
    server: ClickHouse, records: list[Record], window_s: float
) -> None:
    assert_same(server, records, window_s)


def test_a_trace_slice_equals_the_engine_in_process(server: ClickHouse, chdb: ClickHouse) -> None:
    frame = mooncake_frame("conversation_trace.jsonl").head(1500)
    assert clickhouse_results(server, frame, 3600.0).equals(clickhouse_results(chdb, frame, 3600.0))


def test_migrations_are_applied_once(server: ClickHouse) -> None:
    assert migrate.upgrade(server) == []


def test_the_block_records_read_as_on_the_engine_in_process(
    server: ClickHouse, chdb: ClickHouse
) -> None:
    """A read whose schema holds a list (the block hashes) comes back from 18.16
    as from chdb: CSV, which the client prefers there, carries no list."""
    frame = mooncake_frame("conversation_trace.jsonl").head(300)
    for ch in (server, chdb):
        insert_frame(ch, frame)
    args = {"model": None, "from_us": None, "to_us": None}
    on_server = reads.load_block_frame(server, **args)
    assert on_server.height == 300
    assert on_server.equals(reads.load_block_frame(chdb, **args))


@pytest.mark.parametrize("backend", ["server", "chdb"])
def test_an_added_column_migration_that_died_before_its_ledger_runs_again(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """18.16 knows no `ADD COLUMN IF NOT EXISTS`: a migration whose ALTER ran but
    whose ledger row was not written runs again without failing."""
    ch: ClickHouse = request.getfixturevalue(backend)
    name = "2026_12_05_0500_one_hour_writes"
    ch.command(f"ALTER TABLE schema_migrations DELETE WHERE name = '{name}'")
    import time

    deadline = time.monotonic() + 30
    while name in migrate.applied(ch):  # mutations are asynchronous on 18.16
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert migrate.upgrade(ch) == [name]
    columns = ch.query(
        "SELECT name FROM system.columns WHERE database = currentDatabase() "
        "AND table = 'usage_records'",
        {"name": pl.String()},
    )
    assert columns["name"].to_list().count("cache_write_1h_tokens") == 1


def test_session_calls_read_as_on_the_engine_in_process(
    server: ClickHouse, chdb: ClickHouse
) -> None:
    """`GET /v1/sessions`' read (`reads.session_calls`) on 18.16 as on chdb."""
    frame = pl.DataFrame(
        {
            "id": [1, 2, 3, 4],
            "ts_us": [10, 20, 30, 40],
            "service": ["s", "s", "s", "other"],
            "model": ["m", "m", "m", "m"],
            "prompt_tokens": [100, 200, 300, 400],
            "cached_tokens": [0, 100, 0, 0],
            "session_id": ["a", None, "a", "b"],
            "tenant": ["t", None, None, "u"],
        }
    )
    for ch in (server, chdb):
        insert_frame(ch, frame)
    schema = {c: empty_calls().schema[c] for c in CALL_COLUMNS}
    where = CallFilter(service="s", from_us=10, to_us=31)
    on_server = reads.session_calls(server, where, schema).sort("ts_us")
    assert on_server["session_id"].to_list() == ["a", "a"]
    assert on_server.equals(reads.session_calls(chdb, where, schema).sort("ts_us"))
