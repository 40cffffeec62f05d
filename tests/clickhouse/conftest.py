"""ClickHouse for the tests: the engine in-process (chdb, always) and Debian's
clickhouse-server on loopback (where its package is installed; `make test`
installs it, and under CI=true its absence fails)."""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from service.clickhouse import migrate
from service.clickhouse.client import ClickHouse, connect
from service.server_process import free_port
from tests.conftest import chdb_dir, skip_or_fail

SERVER_CONFIG = """<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><console>1</console></logger>
  <http_port>{http_port}</http_port>
  <tcp_port>{tcp_port}</tcp_port>
  <listen_host>127.0.0.1</listen_host>
  <path>{root}/data/</path>
  <tmp_path>{root}/tmp/</tmp_path>
  <users_config>{root}/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
  <mark_cache_size>268435456</mark_cache_size>
</yandex>
"""
USERS = """<?xml version="1.0"?>
<yandex>
  <profiles><default></default></profiles>
  <users><default><password></password><networks><ip>127.0.0.1</ip></networks>
    <profile>default</profile><quota>default</quota></default></users>
  <quotas><default></default></quotas>
</yandex>
"""


@pytest.fixture
def chdb_url() -> str:
    """A new, empty database of the in-process engine."""
    return f"chdb://{chdb_dir()}?database=t_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def chdb(chdb_url: str) -> Iterator[ClickHouse]:
    client = connect(chdb_url)
    migrate.upgrade(client)
    yield client
    client.command(f"DROP DATABASE IF EXISTS {client.database}")
    client.close()


@pytest.fixture(scope="session")
def clickhouse_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Debian's clickhouse-server (18.16) on a free loopback port: its base URL."""
    binary = shutil.which("clickhouse-server") or (
        "/usr/sbin/clickhouse-server" if Path("/usr/sbin/clickhouse-server").exists() else None
    )
    if binary is None:
        skip_or_fail("clickhouse-server is not installed (Debian package clickhouse-server)")
    root = tmp_path_factory.mktemp("clickhouse-server")
    http_port, tcp_port = free_port(), free_port()
    (root / "users.xml").write_text(USERS)
    config = root / "config.xml"
    config.write_text(SERVER_CONFIG.format(http_port=http_port, tcp_port=tcp_port, root=root))
    log = (root / "server.log").open("wb")
    process = subprocess.Popen(
        [str(binary), f"--config-file={config}"], stdout=log, stderr=subprocess.STDOUT
    )
    url = f"http://127.0.0.1:{http_port}/"
    deadline = time.monotonic() + 30
    while True:
        try:
            if httpx.get(url + "ping", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            skip_or_fail(f"clickhouse-server did not start: {(root / 'server.log').read_text()}")
        time.sleep(0.2)
    yield url
    process.terminate()
    process.wait(20)
    log.close()


@pytest.fixture
def server(clickhouse_server: str) -> Iterator[ClickHouse]:
    """A new database on the real server, migrated."""
    client = connect(f"{clickhouse_server}t_{uuid.uuid4().hex[:12]}")
    migrate.upgrade(client)
    yield client
    client.command(f"DROP DATABASE IF EXISTS {client.database}")
    client.close()
