"""Two shards: two Debian clickhouse-server 18.16 processes on loopback, one
`remote_servers` cluster of both, the tables made by the migrations in cluster
mode (docs/deployment.md, "Sharding: two or more servers"). The ClickHouse
deployment on them leaves the relational pass's rollups row for row and its
per-request values id for id, with rows on both shards, on the documented keys;
the reads of the records, the capacity curve and duplicates answer as on one
server (issue 33, defect 10: the pass failed there, then counted 622 evictions
instead of 1,660)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy.orm import Session, sessionmaker

from service import migrate as relational_migrate
from service.analytics import compute_request_metrics
from service.analytics._arrays import window_us
from service.clickhouse import analytics as ch_analytics
from service.clickhouse import clickhouse_for, migrate
from service.clickhouse import reads as ch_reads
from service.clickhouse.client import ClickHouse, connect
from service.clickhouse.pass_sql import Scope
from service.db import make_engine, make_sessionmaker
from service.services import capacity
from service.services.analytics_pass import catch_up
from service.settings import Settings
from tests.analytics.reference import Record, to_frame
from tests.analytics.test_properties import WINDOWS, traffic
from tests.clickhouse import test_pass as pass_tests
from tests.clickhouse import test_retention as retention_tests
from tests.clickhouse.conftest import ServerProcess
from tests.clickhouse.frames import annotate_from, insert_frame
from tests.clickhouse.test_analytics import TABLES as DATA_TABLES
from tests.clickhouse.test_analytics import by_id
from tests.clickhouse.test_pass import TABLES, ingest, records, table_rows
from tests.conftest import drop_database, fresh_database_url, is_postgres_run
from tests.services import findings_traffic
from tests.services.traffic import traffic as service_traffic

CLUSTER = "cachewatch"
#: Where each table's rows go (service.clickhouse.migrate.SHARDING_KEYS): with
#: two shards of weight 1, shard n holds the rows whose key is n modulo 2.
KEYS = {
    "usage_records": "cityHash64(request_id)",
    "session_requests": "cityHash64(session_id)",
    "request_results": "cityHash64(id)",
}


#: A stopping server waits this long for open connections (18.16: 5 s by default),
#: and each keeps one to the other in its Distributed tables' pool.
QUICK_STOP = "<shutdown_wait_unfinished>0</shutdown_wait_unfinished>"


def remote_servers(tcp_ports: list[int]) -> str:
    """The servers' config for a cluster of one shard per port, one replica each."""
    shards = "".join(
        f"<shard><replica><host>127.0.0.1</host><port>{port}</port></replica></shard>"
        for port in tcp_ports
    )
    return f"<remote_servers><{CLUSTER}>{shards}</{CLUSTER}></remote_servers>{QUICK_STOP}"


@pytest.fixture(scope="session")
def two_shards(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """Two 18.16 servers, each configured with the cluster of both: their URLs."""
    servers = [ServerProcess(tmp_path_factory.mktemp(f"clickhouse-shard{n}")) for n in (0, 1)]
    config = remote_servers([s.tcp_port for s in servers])
    try:
        for server in servers:
            server.extra_config = config
            server.start()
        yield [server.url for server in servers]
    finally:
        for server in servers:  # at once: each waits for the other's connections
            if server.process is not None:
                server.process.terminate()
        for server in servers:
            server.stop()


def shard_clients(shards: list[str], database: str) -> list[ClickHouse]:
    return [connect(f"{url}{database}") for url in shards]


def drop_everywhere(shards: list[str], database: str) -> None:
    for shard in shard_clients(shards, database):
        shard.command(f"DROP DATABASE IF EXISTS {database}")
        shard.close()


@pytest.fixture
def profiled(tmp_path: Path, settings: Settings) -> Settings:
    path = tmp_path / "models.toml"
    path.write_text(findings_traffic.MODELS_FILE)
    return settings.model_copy(update={"models_file": path})


@pytest.fixture
def cluster_settings(profiled: Settings, two_shards: list[str]) -> Iterator[Settings]:
    """A ClickHouse deployment on the two shards, talking to the first."""
    database = f"t_{uuid.uuid4().hex[:12]}"
    urls = [f"{url}{database}" for url in two_shards]
    yield profiled.model_copy(
        update={
            "clickhouse_url": urls[0],
            "clickhouse_cluster": CLUSTER,
            "clickhouse_shard_urls": ",".join(urls),
            "clickhouse_visibility_lag_s": 0.0,
        }
    )
    drop_everywhere(two_shards, database)


@pytest.fixture
def cluster_sessions(
    tmp_path: Path, cluster_settings: Settings
) -> Iterator[tuple[Settings, sessionmaker[Session]]]:
    """As test_pass's `clickhouse_sessions`: its own relational database."""
    url = fresh_database_url(tmp_path, "cluster")
    ch_settings = cluster_settings.model_copy(update={"database_url": url})
    engine = make_engine(ch_settings)
    relational_migrate.upgrade(engine)
    yield ch_settings, make_sessionmaker(engine, clickhouse_for(ch_settings))
    engine.dispose()
    drop_database(url)


def rows_per_shard(shards: list[str], database: str, table: str) -> list[int]:
    """Each shard's rows of `table`, after asserting that each holds only the
    rows its sharding key sends there."""
    counts = []
    for n, shard in enumerate(shard_clients(shards, database)):
        local = f"{table}_local"
        frame = shard.query(
            f"SELECT count() AS n, countIf({KEYS[table]} % 2 != {n}) AS elsewhere FROM {local}",
            {"n": pl.Int64(), "elsewhere": pl.Int64()},
        )
        shard.close()
        assert frame["elsewhere"][0] == 0, (table, n)
        counts.append(int(frame["n"][0]))
    return counts


def test_what_the_cluster_rewrite_refuses(settings: Settings) -> None:
    """A migration statement of a kind it does not know, a table without a
    sharding key, and settings that do not say where the shards are."""
    with pytest.raises(ValueError, match="no cluster rewrite"):
        migrate.on_cluster("ALTER TABLE usage_records DROP COLUMN x", CLUSTER, "db")
    # An added column goes to the shard's table, then to the Distributed one over it.
    added = migrate.on_cluster("ALTER TABLE usage_records ADD COLUMN x Int64", CLUSTER, "db")
    assert added == [
        "ALTER TABLE usage_records_local ADD COLUMN x Int64",
        "ALTER TABLE usage_records ADD COLUMN x Int64",
    ]
    table = "CREATE TABLE IF NOT EXISTS t (a Int64) ENGINE = MergeTree ORDER BY a"
    with pytest.raises(ValueError, match="no sharding key"):
        migrate.on_cluster(table, CLUSTER, "db")
    assert migrate.on_cluster(table.replace("MergeTree ORDER BY a", "Memory"), CLUSTER, "db") == [
        table.replace("MergeTree ORDER BY a", "Memory")
    ]
    on = settings.model_copy(
        update={"clickhouse_url": "http://a:8123/db", "clickhouse_cluster": CLUSTER}
    )
    with pytest.raises(ValueError, match="SHARD_URLS"):
        migrate.shard_urls(on)
    elsewhere = on.model_copy(update={"clickhouse_shard_urls": "http://a:8123/db,http://b/x"})
    with pytest.raises(ValueError, match="does not name the database 'db'"):
        migrate.shard_urls(elsewhere)
    with pytest.raises(ValueError, match="no cluster"):
        connect("chdb:///tmp/x", CLUSTER)


def test_each_shard_has_local_and_distributed_tables(
    cluster_settings: Settings, two_shards: list[str]
) -> None:
    ch = clickhouse_for(cluster_settings)
    assert ch is not None
    for shard in shard_clients(two_shards, ch.database):
        engines = dict(
            shard.query(
                "SELECT name, engine FROM system.tables WHERE database = currentDatabase()"
            ).iter_rows()
        )
        shard.close()
        for table in (*KEYS, "block_uses"):
            assert engines[table] == "Distributed"
            assert engines[f"{table}_local"] == "ReplacingMergeTree"
        assert engines["pass_uses"] == engines["pass_candidates"] == "Memory"
        assert engines["schema_migrations"] == "MergeTree"
        assert not {"block_uses_of_blocks", "session_requests_of_records"} & set(engines)
    # The same database as one server's: refused, not read through the wrong tables.
    with pytest.raises(ValueError, match="made for a cluster"):
        one_server = cluster_settings.model_copy(update={"clickhouse_cluster": None})
        migrate.upgrade_deployment(ch, one_server)


def test_same_rollups_as_the_relational_pass(
    session: Session,
    profiled: Settings,
    cluster_sessions: tuple[Settings, sessionmaker[Session]],
    two_shards: list[str],
) -> None:
    """test_pass's scenario (a first pass, forward passes with duplicates and
    records out of order, late records) on the two shards; then the data is there
    on both, each row on its key's shard."""
    pass_tests.test_same_rollups_as_the_relational_pass(session, profiled, cluster_sessions)
    database = str(cluster_sessions[0].clickhouse_url).rsplit("/", 1)[1]
    for table in KEYS:
        counts = rows_per_shard(two_shards, database, table)
        assert min(counts) > 0, (table, counts)


def test_reads_of_the_records(
    session: Session,
    profiled: Settings,
    cluster_sessions: tuple[Settings, sessionmaker[Session]],
) -> None:
    pass_tests.test_reads_of_the_records(session, profiled, cluster_sessions)


def test_capacity_as_on_one_server(
    session: Session,
    cluster_sessions: tuple[Settings, sessionmaker[Session]],
    chdb_url: str,
) -> None:
    """The curve from the shards is the one server's (the engine in-process), at
    the sampled rate and whole; whole, it is the relational replay's."""
    ch_settings, factory = cluster_sessions
    one_server = connect(chdb_url)
    migrate.upgrade(one_server)
    batch = service_traffic(800, seed=3)
    args: dict[str, Any] = {
        "model": "m", "from_us": None, "to_us": None, "sizes": [100, 300, 1000, 100_000]
    }  # fmt: skip
    engine = make_engine(ch_settings)
    alone_factory = make_sessionmaker(engine, one_server)
    try:
        with factory() as on_shards, alone_factory() as alone:
            for s in (session, on_shards, alone):
                ingest(s, batch)
                s.commit()
            exact = capacity.capacity(session, **args)
            for rate in (1.0, 0.01):
                got = capacity.capacity(on_shards, **args, sample_rate=rate)
                assert got == capacity.capacity(alone, **args, sample_rate=rate), rate
            whole = capacity.capacity(on_shards, **args, sample_rate=1.0)
            assert [p["hit_rate"] for p in whole["points"]] == pytest.approx(
                [p["hit_rate"] for p in exact["points"]]
            )
    finally:
        engine.dispose()
        one_server.command(f"DROP DATABASE IF EXISTS {one_server.database}")
        one_server.close()


def test_a_batch_posted_twice_counts_once(
    session: Session,
    profiled: Settings,
    cluster_sessions: tuple[Settings, sessionmaker[Session]],
) -> None:
    """Posted twice: the second time all duplicates, the rollups the relational
    ones. Stored twice behind the duplicate check's back (a raced retry: a copy
    with its own id), a `FINAL` read counts it once: both copies have the same
    request_id, so the same shard, where `FINAL` folds them."""
    ch_settings, factory = cluster_sessions
    batch = records()[:300]
    with factory() as on_shards:
        for s, s_settings in ((session, profiled), (on_shards, ch_settings)):
            assert ingest(s, batch) == (len(batch), 0)
            s.commit()
            assert ingest(s, batch) == (0, len(batch))
            s.commit()
            catch_up(s, s_settings)
            s.commit()
        for model in TABLES:
            assert table_rows(on_shards, model) == table_rows(session, model)
    ch = clickhouse_for(ch_settings)
    assert ch is not None
    copy_of_ten(ch)
    assert ch.query("SELECT count() AS n FROM usage_records")["n"][0] == len(batch) + 10
    totals = ch_reads.capacity_totals(ch, None, None, None)
    with_blocks = sum(1 for r in batch if r.get("block_hashes"))
    assert totals["requests"].sum() == with_blocks


def copy_of_ten(ch: ClickHouse) -> None:
    """Ten stored records again, each with the next id (its version one lower: the
    first copy is the one kept)."""
    columns = ch.query(
        "SELECT name FROM system.columns "
        "WHERE database = currentDatabase() AND table = 'usage_records'",
        {"name": pl.String()},
    )["name"].to_list()
    changed = {"id": "id + 1", "version": "version - 1"}
    select_list = ", ".join(changed.get(c, c) for c in columns)
    ch.command(
        f"INSERT INTO usage_records ({', '.join(columns)}) SELECT {select_list} "
        "FROM usage_records ORDER BY id LIMIT 10"
    )


def test_retention_drops_old_days(cluster_sessions: tuple[Settings, sessionmaker[Session]]) -> None:
    """test_retention's rule on the shards: each shard's local tables drop the day
    (a Distributed table refuses partition operations)."""
    ch_settings, factory = cluster_sessions
    ch = clickhouse_for(ch_settings)
    assert ch is not None
    deployment = (ch_settings.model_copy(update={"retention_days": 30}), factory, ch)
    retention_tests.test_a_day_with_records_the_pass_has_not_read_is_kept(deployment)


@pytest.fixture(scope="module")
def cluster_ch(two_shards: list[str]) -> Iterator[ClickHouse]:
    """One cluster database for the property test, through the first shard."""
    database = f"t_{uuid.uuid4().hex[:12]}"
    urls = [f"{url}{database}" for url in two_shards]
    migrate.upgrade_shards(CLUSTER, urls)
    client = connect(urls[0], CLUSTER)
    yield client
    client.close()
    drop_everywhere(two_shards, database)


def cluster_results(
    ch: ClickHouse, shards: list[str], frame: pl.DataFrame, window_s: float, from_us: int
) -> pl.DataFrame:
    """test_analytics' `clickhouse_results` on the cluster: TRUNCATE of a
    Distributed table empties no shard, so each shard's local tables are."""
    for shard in shard_clients(shards, ch.database):
        for table in DATA_TABLES:
            shard.command(f"TRUNCATE TABLE {table}_local")
        shard.close()
    insert_frame(ch, frame)
    high = int(frame["id"].max())  # type: ignore[arg-type]
    scope = Scope(from_us=from_us, high_id=high, window_us=window_us(window_s))
    _, results = ch_analytics.compute(ch, scope, 3, annotate_from(frame))
    return results


@pytest.mark.skipif(is_postgres_run(), reason="no relational database involved")
@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(records=traffic(), window_s=WINDOWS, split_s=st.integers(0, 9))
def test_per_request_values_equal_the_relational_pass(
    cluster_ch: ClickHouse,
    two_shards: list[str],
    records: list[Record],
    window_s: float,
    split_s: int,
) -> None:
    """test_analytics' property on the shards: every cause, sessions, prefix keys,
    ties, profiles and windows, from a range's start on (looking back before it)."""
    frame = to_frame(records)
    from_us = split_s * 1_000_000
    expected, _ = compute_request_metrics(frame, window_s)
    got = cluster_results(cluster_ch, two_shards, frame, window_s, from_us)
    assert got.schema == expected.schema
    assert by_id(got) == by_id(expected.filter(pl.col("ts_us") >= from_us))
