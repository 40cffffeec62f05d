"""Usage records, their per-request results and their block uses in ClickHouse
(`CACHEWATCH_CLICKHOUSE_URL`; docs/deployment.md). Tokens, events, regressions,
alerts and every rollup stay in the relational database.

The relational session carries the ClickHouse client (`Session.info`), so the
repository functions that read or write usage records ask `clickhouse_of(session)`
and answer from ClickHouse when it is set: their callers do not change. Without
the setting nothing here is imported by the hot paths and nothing changes.

The records' ids come from `ids_for(engine)`: one source per process and
relational database, its salt leased there (service.clickhouse.ids).
"""

from __future__ import annotations

import threading

from sqlalchemy import Connection, Engine
from sqlalchemy.orm import Session

from service.clickhouse.client import ClickHouse, HttpClient, connect
from service.clickhouse.group_commit import GroupCommit
from service.clickhouse.ids import IdSource, SaltLease
from service.settings import Settings

INFO_KEY = "clickhouse"

_clients: dict[str, ClickHouse] = {}
_ids: dict[str, IdSource] = {}
_groups: dict[int, GroupCommit] = {}
_lock = threading.Lock()


def clickhouse_of(session: Session) -> ClickHouse | None:
    """The ClickHouse holding the usage records of this session's deployment."""
    return session.info.get(INFO_KEY)


def clickhouse_for(settings: Settings) -> ClickHouse | None:
    """The process's client for `settings.clickhouse_url`, its tables migrated on
    first use (on a cluster, every shard's: `migrate.upgrade_deployment`); None
    without the setting."""
    url = settings.clickhouse_url
    if not url:
        return None
    with _lock:
        client = _clients.get(url)
        if client is None:
            from service.clickhouse import migrate

            client = connect(url, settings.clickhouse_cluster)
            if settings.clickhouse_cluster and isinstance(client, HttpClient):
                client.shard_urls = tuple(migrate.shard_urls(settings))
            migrate.upgrade_deployment(client, settings)
            _clients[url] = client
        return client


def group_commit_of(ch: ClickHouse) -> GroupCommit:
    """The process's group commit of inserts into `ch` (service.clickhouse.group_commit).
    Keyed by the client's identity: a client in use is alive, so its key is not
    reused; an idle group holds nothing."""
    with _lock:
        return _groups.setdefault(id(ch), GroupCommit())


def release_id_sources() -> None:
    """Release every id source of the process (its salt freed, its renewals
    stopped) and forget them: a process that made ids for databases it is done
    with (the tests, a CLI command) stops renewing their leases."""
    with _lock:
        sources = list(_ids.values())
        _ids.clear()
    for source in sources:
        source.release()


def ids_of(session: Session) -> IdSource:
    """The process's record ids for the relational database of `session`."""
    bind = session.get_bind()
    return ids_for(bind.engine if isinstance(bind, Connection) else bind)


def ids_for(engine: Engine) -> IdSource:
    """One id source per process and database (keyed by URL: every engine of one
    database shares its salt), made on first use; its lease is claimed on its
    first take, or by `IdSource.start` (the API's startup)."""
    key = engine.url.render_as_string(hide_password=False)
    with _lock:
        source = _ids.get(key)
        if source is None:
            source = _ids[key] = IdSource(SaltLease(engine))
        return source
