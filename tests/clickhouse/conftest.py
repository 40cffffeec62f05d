"""ClickHouse for the tests: the engine in-process (chdb, always) and Debian's
clickhouse-server on loopback (where its package is installed; `make test`
installs it, and under CI=true its absence fails)."""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from sqlalchemy.orm import Session, sessionmaker

from service import migrate as relational_migrate
from service.clickhouse import clickhouse_for, migrate, release_id_sources
from service.clickhouse.client import ClickHouse, connect
from service.db import make_engine, make_sessionmaker
from service.server_process import free_port
from service.settings import Settings
from tests.conftest import chdb_dir, drop_database, fresh_database_url, skip_or_fail

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


def server_binary() -> str:
    """Debian's clickhouse-server, or a skip (a failure under CI=true)."""
    binary = shutil.which("clickhouse-server") or (
        "/usr/sbin/clickhouse-server" if Path("/usr/sbin/clickhouse-server").exists() else None
    )
    if binary is None:
        skip_or_fail("clickhouse-server is not installed (Debian package clickhouse-server)")
    assert binary is not None
    return binary


@dataclass
class ServerProcess:
    """A clickhouse-server of the tests' own: its data under `root`, on free
    loopback ports that a restart keeps (a client made before reconnects).
    `extra_config`: more elements of its config.xml (a cluster's `remote_servers`,
    which names the ports of every server: known before any starts)."""

    root: Path
    http_port: int = field(default_factory=free_port)
    tcp_port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    extra_config: str = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/"

    def start(self, timeout_s: float = 30.0) -> None:
        """Start it and wait until it answers /ping; a skip (a failure under CI)
        when it does not."""
        (self.root / "users.xml").write_text(USERS)
        config = self.root / "config.xml"
        config.write_text(
            SERVER_CONFIG.format(
                http_port=self.http_port, tcp_port=self.tcp_port, root=self.root
            ).replace("</yandex>", f"{self.extra_config}</yandex>")
        )
        with (self.root / "server.log").open("ab") as log:
            self.process = subprocess.Popen(
                [server_binary(), f"--config-file={config}"], stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout_s
        while not self._answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.process.kill()
                skip_or_fail(f"clickhouse-server did not start: {self.log()}")
            time.sleep(0.2)

    def _answers(self) -> bool:
        try:
            return httpx.get(self.url + "ping", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(20)

    def log(self) -> str:
        return (self.root / "server.log").read_text(errors="replace")[-4000:]


@pytest.fixture(scope="session")
def clickhouse_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Debian's clickhouse-server (18.16) on a free loopback port: its base URL."""
    server = ServerProcess(tmp_path_factory.mktemp("clickhouse-server"))
    server.start()
    yield server.url
    server.stop()


@pytest.fixture
def server(clickhouse_server: str) -> Iterator[ClickHouse]:
    """A new database on the real server, migrated."""
    client = connect(f"{clickhouse_server}t_{uuid.uuid4().hex[:12]}")
    migrate.upgrade(client)
    yield client
    client.command(f"DROP DATABASE IF EXISTS {client.database}")
    client.close()


@contextmanager
def deployment_of(
    settings: Settings, tmp_path: Path, clickhouse_url: str, label: str
) -> Iterator[tuple[Settings, sessionmaker[Session]]]:
    """A deployment of its own: a fresh relational database (`label`), its records
    in `clickhouse_url`; both dropped after."""
    url = fresh_database_url(tmp_path, label)
    ch_settings = settings.model_copy(
        update={
            "database_url": url,
            "clickhouse_url": clickhouse_url,
            "clickhouse_visibility_lag_s": 0.0,
        }
    )
    engine = make_engine(ch_settings)
    relational_migrate.upgrade(engine)
    ch = clickhouse_for(ch_settings)
    assert ch is not None
    yield ch_settings, make_sessionmaker(engine, ch)
    ch.command(f"DROP DATABASE IF EXISTS {ch.database}")
    engine.dispose()
    drop_database(url)


@pytest.fixture(autouse=True)
def _id_sources_released() -> Iterator[None]:
    """Each test's id sources released after it: their renewal threads would go on
    renewing leases in databases the test dropped, and log it in later tests."""
    yield
    release_id_sources()
