"""A ClickHouse that is not serving is a 503 with Retry-After on every endpoint,
/healthz included, never a 500 (issue 33, defect 4; contract section 2): through
real HTTP, a `cachewatch serve` process in front of a clickhouse-server of the
test's own, stopped and started again. A statement the server refuses stays a
plain ClickHouseError."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import httpx
import orjson
import pytest

from service.clickhouse.client import ClickHouseError, ClickHouseUnavailable, connect
from service.server_process import free_port
from tests.api.test_usage import record
from tests.clickhouse.conftest import ServerProcess
from tests.conftest import LiveServer, drop_database, fresh_database_url, make_live_server


def test_a_closed_port_is_unavailable() -> None:
    with pytest.raises(ClickHouseUnavailable) as caught:
        connect(f"http://127.0.0.1:{free_port()}/cw")
    assert caught.value.reason == "ConnectError"
    assert isinstance(caught.value, ClickHouseError)


class Stub(HTTPServer):
    """A loopback HTTP server answering every POST with `status` and `body`."""

    status = 200
    body = b"no"


class _Answers(BaseHTTPRequestHandler):
    server: Stub

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(self.server.status)
        self.send_header("Content-Length", str(len(self.server.body)))
        self.end_headers()
        self.wfile.write(self.server.body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def stub() -> Iterator[Stub]:
    server = Stub(("127.0.0.1", 0), _Answers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("status", [502, 503, 504])
def test_an_answer_that_it_is_not_serving_is_unavailable(stub: Stub, status: int) -> None:
    client = connect(f"http://127.0.0.1:{stub.server_address[1]}/cw")
    stub.status = status
    with pytest.raises(ClickHouseUnavailable, match=f"HTTP {status}"):
        client.command("SELECT 1")


def test_a_shard_it_cannot_reach_is_unavailable(stub: Stub) -> None:
    """18.16's answer when a shard of a Distributed table is down: a 500 with the
    code of a network error, after the live shards wrote their rows."""
    client = connect(f"http://127.0.0.1:{stub.server_address[1]}/cw")
    stub.status = 500
    stub.body = b"Code: 210, e.displayText() = DB::NetException: Connection refused (shard 2)"
    with pytest.raises(ClickHouseUnavailable):
        client.command("INSERT INTO usage_records SELECT 1")


def test_a_refused_statement_is_not(stub: Stub) -> None:
    client = connect(f"http://127.0.0.1:{stub.server_address[1]}/cw")
    stub.status = 500  # ClickHouse's answer to a statement that failed
    with pytest.raises(ClickHouseError) as caught:
        client.command("SELECT nonsense")
    assert not isinstance(caught.value, ClickHouseUnavailable)


@pytest.fixture
def clickhouse(tmp_path: Path) -> Iterator[ServerProcess]:
    """A clickhouse-server of this test's own, which it may stop."""
    root = tmp_path / "clickhouse"
    root.mkdir()
    server = ServerProcess(root)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def api(tmp_path: Path, clickhouse: ServerProcess) -> Iterator[LiveServer]:
    """`cachewatch serve` with its records in `clickhouse`."""
    url = fresh_database_url(tmp_path, "unavailable")
    server = make_live_server(
        tmp_path,
        url,
        clickhouse_url=clickhouse.url + "cw",
        clickhouse_visibility_lag_s="0",
        run_jobs="false",
    )
    server.start()
    yield server
    server.stop()
    drop_database(url)


def test_503_with_retry_after_while_down_and_counted_once_back(
    api: LiveServer, clickhouse: ServerProcess
) -> None:
    ingest = {"Authorization": f"Bearer {api.token('ingest')}"}
    read = {"Authorization": f"Bearer {api.token('read')}"}
    http = httpx.Client(base_url=api.url, timeout=30)

    def post(first: int, n: int) -> httpx.Response:
        body = b"\n".join(orjson.dumps(record(i)) for i in range(first, first + n))
        return http.post("/v1/usage", content=body, headers=ingest)

    assert post(0, 3).json()["accepted"] == 3
    assert http.get("/v1/metrics", headers=read).json()["totals"]["requests"] == 3

    clickhouse.stop()
    for answer in (
        post(3, 2),
        http.get("/v1/metrics", headers=read),
        http.get("/healthz"),
    ):
        assert answer.status_code == 503, answer.text
        assert answer.headers["Retry-After"] == "5"
        assert "ClickHouse ConnectError" in answer.json()["error"]

    clickhouse.start()
    assert http.get("/healthz").status_code == 200
    assert post(3, 2).json()["accepted"] == 2
    assert http.get("/v1/metrics", headers=read).json()["totals"]["requests"] == 5
