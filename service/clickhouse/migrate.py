"""The ClickHouse tables' migrations: `migrations/clickhouse/*.sql`, applied in
the order of their date-and-slug names, each once, recorded in `schema_migrations`.

Alembic keeps the relational schema; it has no ClickHouse dialect of its own, so
the ClickHouse side is plain SQL files in the layout Langfuse and Helicone use for
theirs (one file per change, never edited once released). Each statement is
written to be re-runnable (`IF NOT EXISTS`), so a migration interrupted halfway is
completed by the next run.

On a cluster (`CACHEWATCH_CLICKHOUSE_CLUSTER`, docs/deployment.md, "Sharding") the
same files run on every shard, each statement rewritten (`on_cluster`) rather
than kept as a second copy of the SQL that could drift from the first: a
MergeTree-family table becomes `<name>_local`, the shard's part, and `<name>` a
Distributed table over the shards' parts with the table's sharding key
(`SHARDING_KEYS`), so every statement of the service reads and writes `<name>` on
one server or many. Memory tables (the pass's scratch) stay local: the pass fills
and reads them on the one server it talks to. Materialized views are not created
(the newest migration drops them: the pass derives their rows). The DDL goes to
each shard's URL in turn: 18.16 runs `ON CLUSTER` DDL only through ZooKeeper.
Each shard keeps its own `schema_migrations`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

import polars as pl

from service.clickhouse.client import ClickHouse, connect, quote
from service.settings import Settings

# Package data beside this module, so an installed wheel (the Docker image, a pip
# install) carries them; a path into the source tree would not exist there.
#: `migrations/clickhouse`, reached through the package (`service/migrations` is that
#: folder: a link in the checkout, a copy in the wheel).
MIGRATIONS = Path(__file__).resolve().parent.parent / "migrations" / "clickhouse"

_LEDGER = """CREATE TABLE IF NOT EXISTS schema_migrations (
    name String, applied_us Int64
) ENGINE = MergeTree ORDER BY name"""


def statements(path: Path) -> list[str]:
    """The statements of one migration file: `;`-terminated, `--` comments dropped."""
    lines = [line for line in path.read_text().splitlines() if not line.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def applied(ch: ClickHouse) -> set[str]:
    ch.command(_LEDGER)
    frame = ch.query("SELECT name FROM schema_migrations", {"name": pl.String()})
    return set(frame["name"].to_list())


def upgrade(ch: ClickHouse, directory: Path = MIGRATIONS, cluster: str | None = None) -> list[str]:
    """Apply the migrations not applied yet; returns their names. `cluster`: `ch`
    is one of its shards, and each statement is rewritten for it (`on_cluster`)."""
    done = applied(ch)
    ran = []
    for path in sorted(directory.glob("*.sql")):
        if path.stem in done:
            continue
        for statement in statements(path):
            for sql in on_cluster(statement, cluster, ch.database) if cluster else [statement]:
                if not _column_there(ch, sql):
                    ch.command(sql)
        ch.command(
            "INSERT INTO schema_migrations (name, applied_us) "
            f"VALUES ({quote(path.stem)}, {time.time_ns() // 1000})"
        )
        ran.append(path.stem)
    return ran


def _column_there(ch: ClickHouse, sql: str) -> bool:
    """Whether `sql` adds a column the table has already: a migration that died
    after its ALTER and before its ledger row runs again, and 18.16 knows no
    `ADD COLUMN IF NOT EXISTS`."""
    added = _ADDED_COLUMN.match(sql)
    if added is None:
        return False
    table, column = added.groups()
    found = ch.query(
        "SELECT count() AS n FROM system.columns WHERE database = currentDatabase() "
        f"AND table = {quote(table)} AND name = {quote(column)}",
        {"n": pl.Int64()},
    )
    return int(found["n"][0]) > 0


#: Each MergeTree-family table's sharding key on a cluster. The pass compares every
#: use of a block key with the one before, so all uses of a (model, key) share a
#: shard; a session's requests share one for the same reason; the records (and
#: so the copies of a raced retry, which `FINAL` folds per shard) by request_id;
#: results by id, evenly (Snowflake ids' low bits are a counter).
SHARDING_KEYS = {
    "usage_records": "cityHash64(request_id)",
    "block_uses": "cityHash64(model, key)",
    "session_requests": "cityHash64(session_id)",
    "request_results": "cityHash64(id)",
}
#: A Distributed table's shard-local part: `<name>_local`.
LOCAL = "{}_local"

_CREATE = re.compile(
    r"CREATE TABLE IF NOT EXISTS (\w+)\s*(\(.*\))\s*ENGINE\s*=\s*(\w+)(.*)", re.S | re.I
)
_VIEW = re.compile(r"CREATE MATERIALIZED VIEW\b", re.I)
_DROP = re.compile(r"DROP TABLE IF EXISTS (\w+)", re.I)
_ADD_COLUMN = re.compile(r"ALTER TABLE (\w+) (ADD COLUMN .+)", re.I | re.S)
_ADDED_COLUMN = re.compile(r"ALTER TABLE (\w+) ADD COLUMN (\w+)", re.I)


def on_cluster(statement: str, cluster: str, database: str) -> list[str]:
    """`statement` as the statements that make its effect on one shard of
    `cluster` (module docstring). A statement of another kind raises: a new kind
    of migration needs its own rewrite here, not a silent one-server table."""
    if created := _CREATE.fullmatch(statement):
        return _create_on_cluster(*created.groups(), cluster=cluster, database=database)
    if _VIEW.match(statement):
        return []
    if dropped := _DROP.fullmatch(statement):
        return [statement, f"DROP TABLE IF EXISTS {LOCAL.format(dropped.group(1))}"]
    if added := _ADD_COLUMN.fullmatch(statement):
        # The shard's own table first, then the Distributed table over it.
        name, change = added.groups()
        return [f"ALTER TABLE {LOCAL.format(name)} {change}", statement]
    raise ValueError(f"no cluster rewrite for this migration statement: {statement[:200]}")


def _create_on_cluster(
    name: str, columns: str, engine: str, rest: str, *, cluster: str, database: str
) -> list[str]:
    """A MergeTree-family table as its local part and a Distributed table over the
    parts; any other engine (Memory) as it is."""
    if not engine.endswith("MergeTree"):
        return [f"CREATE TABLE IF NOT EXISTS {name} {columns} ENGINE = {engine}{rest}"]
    if name not in SHARDING_KEYS:
        raise ValueError(f"{name} has no sharding key (service.clickhouse.migrate.SHARDING_KEYS)")
    local = LOCAL.format(name)
    over = ", ".join((quote(cluster), quote(database), quote(local), SHARDING_KEYS[name]))
    return [
        f"CREATE TABLE IF NOT EXISTS {local} {columns} ENGINE = {engine}{rest}",
        f"CREATE TABLE IF NOT EXISTS {name} AS {local} ENGINE = Distributed({over})",
    ]


def shard_urls(settings: Settings) -> list[str]:
    """Every shard's URL (`clickhouse_shard_urls`), then `clickhouse_url` when it is
    not one of them (a server that answers queries, holding no shard); each must
    name the database of `clickhouse_url`, which the Distributed tables name."""
    url = settings.clickhouse_url or ""
    shards = [u.strip() for u in settings.clickhouse_shard_urls.split(",") if u.strip()]
    if not shards:
        raise ValueError(
            "CACHEWATCH_CLICKHOUSE_CLUSTER needs CACHEWATCH_CLICKHOUSE_SHARD_URLS: every "
            "shard's http://host:8123/database, comma-separated, for the migrations"
        )
    urls = list(dict.fromkeys([*shards, url]))
    wanted = _database_of(url)
    for other in urls:
        if _database_of(other) != wanted:
            raise ValueError(f"{other} does not name the database {wanted!r} of the cluster")
    return urls


def _database_of(url: str) -> str:
    return urlsplit(url).path.strip("/") or "default"


def upgrade_deployment(ch: ClickHouse, settings: Settings) -> None:
    """The migrations of a deployment: `ch`'s server, or on a cluster every
    shard's (`shard_urls`); then a check that the tables are of the deployment's
    layout: switching a server to a cluster, or back, moves no data and would
    leave the service reading the wrong tables, so it is refused here."""
    cluster = settings.clickhouse_cluster
    if not cluster:
        upgrade(ch)
    else:
        upgrade_shards(cluster, shard_urls(settings))
    _check_layout(ch, cluster)


def upgrade_shards(cluster: str, urls: Sequence[str]) -> dict[str, list[str]]:
    """Apply the migrations on each server of `urls`, one after the other; returns
    what ran where."""
    ran = {}
    for url in urls:
        shard = connect(url, cluster)
        try:
            ran[url] = upgrade(shard, cluster=cluster)
        finally:
            shard.close()
    return ran


def _check_layout(ch: ClickHouse, cluster: str | None) -> None:
    engine = ch.query(
        "SELECT engine FROM system.tables "
        "WHERE database = currentDatabase() AND name = 'usage_records'",
        {"engine": pl.String()},
    )["engine"].to_list()
    distributed = engine == ["Distributed"]
    if distributed != bool(cluster):
        made = "a cluster (Distributed)" if distributed else "one server"
        raise ValueError(
            f"the ClickHouse database {ch.database} was made for {made}, but "
            f"CACHEWATCH_CLICKHOUSE_CLUSTER is {cluster or 'unset'}: a deployment keeps "
            "its layout (a cluster starts from empty databases: docs/deployment.md)"
        )
