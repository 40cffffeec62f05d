"""NDJSON output and posting like a log shipper, against a tiny real HTTP
server on 127.0.0.1."""

import io
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import orjson
import pytest

from cachewatch_client.shipper import retry_after_s
from service.simulate import PostError, post_events, post_records, write_ndjson
from service.simulate.output import ndjson_batches


@dataclass
class FakeServer:
    """Records every request; answers from a script of (status, headers), then 200."""

    script: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    requests: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    def start(self, port: int = 0) -> str:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                fake.requests.append((self.path, dict(self.headers), body))
                status, headers = fake.script.pop(0) if fake.script else (200, {})
                if status == 200 and self.path == "/v1/usage":
                    n = body.count(b"\n")
                    payload = {"accepted": n, "duplicates": 0, "rejected": 0, "errors": []}
                else:
                    payload = {"error": "busy"} if status != 200 else {"ok": True}
                data = orjson.dumps(payload)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def fake() -> Iterator[FakeServer]:
    server = FakeServer()
    yield server
    server.stop()


def records(n: int) -> list[dict[str, Any]]:
    return [
        {"request_id": f"r{i}", "ts": 1_700_000_000 + i, "service": "s", "model": "m",
         "prompt_tokens": 100, "cached_tokens": 50}
        for i in range(n)
    ]  # fmt: skip


def test_batches_with_a_503_and_retry_after_then_success(fake: FakeServer) -> None:
    fake.script = [(200, {}), (503, {"Retry-After": "2"})]
    url = fake.start()
    waits: list[float] = []
    stats = post_records(url, "tok-1", records(250), batch_size=100, sleep=waits.append)
    assert waits == [2.0]  # Retry-After honoured
    assert stats.batches == 3 and stats.records == 250 and stats.accepted == 250
    assert stats.retries == 1
    paths = [p for p, _, _ in fake.requests]
    assert paths == ["/v1/usage"] * 4
    bodies = [b for _, _, b in fake.requests]
    assert bodies[1] == bodies[2], "the refused batch is sent again as it was"
    sent = [orjson.loads(line) for b in (bodies[0], *bodies[2:]) for line in b.splitlines()]
    assert [r["request_id"] for r in sent] == [f"r{i}" for i in range(250)]
    for _, headers, _ in fake.requests:
        assert headers["Authorization"] == "Bearer tok-1"


def test_a_real_sleep_waits_for_retry_after(fake: FakeServer) -> None:
    fake.script = [(503, {"Retry-After": "1"})]
    url = fake.start()
    import time

    started = time.monotonic()
    stats = post_records(url, "t", records(3), batch_size=10)
    assert time.monotonic() - started >= 0.95
    assert stats.accepted == 3 and stats.retries == 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_connection_errors_are_retried_until_the_server_is_up(fake: FakeServer) -> None:
    port = free_port()
    waits: list[float] = []

    def sleep(seconds: float) -> None:
        waits.append(seconds)
        if len(waits) == 2:
            fake.start(port)  # the server comes up during the second backoff

    stats = post_records(
        f"http://127.0.0.1:{port}", "t", records(5), batch_size=2, sleep=sleep, backoff_s=0.1
    )
    assert waits == [0.1, 0.2]  # exponential backoff without Retry-After
    assert stats.accepted == 5 and stats.batches == 3


def test_a_refused_batch_raises_without_retrying(fake: FakeServer) -> None:
    fake.script = [(401, {})]
    url = fake.start()
    with pytest.raises(PostError, match="401"):
        post_records(url, "bad", records(3), sleep=lambda s: None)
    assert len(fake.requests) == 1


def test_giving_up_after_max_attempts(fake: FakeServer) -> None:
    fake.script = [(503, {})] * 5
    url = fake.start()
    with pytest.raises(PostError, match="gave up after 3 attempts"):
        post_records(url, "t", records(3), sleep=lambda s: None, max_attempts=3)


def test_events_are_posted_as_one_json_array(fake: FakeServer) -> None:
    fake.script = [(503, {"Retry-After": "0"})]
    url = fake.start()
    events = [
        {"ts": "2025-03-03T10:00:00Z", "service": "s", "kind": "deploy", "model": "m",
         "deploy": "v2", "replicas": None, "description": "release v2"},
    ]  # fmt: skip
    stats = post_events(url + "/", "t", events, sleep=lambda s: None)
    assert stats.accepted == 1 and stats.retries == 1
    path, headers, body = fake.requests[-1]
    assert path == "/v1/events" and orjson.loads(body) == events
    assert headers["Authorization"] == "Bearer t"


def test_batches_respect_the_byte_limit() -> None:
    batches = list(ndjson_batches(records(10), batch_size=100, max_bytes=300))
    assert sum(n for n, _ in batches) == 10
    assert all(len(body) <= 300 for _, body in batches)
    with pytest.raises(ValueError):
        list(ndjson_batches(records(1), batch_size=0))


def test_retry_after_forms() -> None:
    assert retry_after_s("3") == 3.0
    assert retry_after_s(None) is None
    assert retry_after_s("soon") is None
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # in the past


def test_write_ndjson_round_trips() -> None:
    out = io.BytesIO()
    assert write_ndjson(records(5000), out) == 5000
    lines = out.getvalue().splitlines()
    assert [orjson.loads(line) for line in lines] == records(5000)
