"""End-to-end fixtures: syslog-ng shipping to the live server (see syslog.py)."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine

from tests.conftest import LiveServer
from tests.e2e.syslog import Shipper, config, find_syslog_ng


@pytest.fixture
def syslog_ng_binary() -> str:
    return find_syslog_ng()


@pytest.fixture
def shipped(live_server: LiveServer, syslog_ng_binary: str, tmp_path: Path) -> Iterator[Shipper]:
    """syslog-ng configured to follow `ndjson` and post to the live server."""
    workdir = tmp_path / "syslog-ng"
    workdir.mkdir()
    ndjson = workdir / "usage.ndjson"
    conf = workdir / "syslog-ng.conf"
    conf.write_text(config(ndjson, live_server.url, live_server.token("ingest")))
    engine = create_engine(live_server.database_url)
    yield Shipper(syslog_ng_binary, conf, workdir, ndjson, engine)
    engine.dispose()
