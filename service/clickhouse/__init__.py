"""Usage records, their per-request results and their block uses in ClickHouse
(`CACHEWATCH_CLICKHOUSE_URL`; docs/deployment.md). Tokens, events, regressions,
alerts and every rollup stay in the relational database.

The relational session carries the ClickHouse client (`Session.info`), so the
repository functions that read or write usage records ask `clickhouse_of(session)`
and answer from ClickHouse when it is set: their callers do not change. Without
the setting nothing here is imported by the hot paths and nothing changes.
"""

from __future__ import annotations

import threading

from sqlalchemy.orm import Session

from service.clickhouse.client import ClickHouse, connect
from service.settings import Settings

INFO_KEY = "clickhouse"

_clients: dict[str, ClickHouse] = {}
_lock = threading.Lock()


def clickhouse_of(session: Session) -> ClickHouse | None:
    """The ClickHouse holding the usage records of this session's deployment."""
    return session.info.get(INFO_KEY)


def clickhouse_for(settings: Settings) -> ClickHouse | None:
    """The process's client for `settings.clickhouse_url`, its tables migrated on
    first use; None without the setting."""
    url = settings.clickhouse_url
    if not url:
        return None
    with _lock:
        client = _clients.get(url)
        if client is None:
            from service.clickhouse import migrate

            client = connect(url)
            migrate.upgrade(client)
            _clients[url] = client
        return client
