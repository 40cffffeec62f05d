"""A fake cachewatch for the client's tests (tests/client/test_shipper.py,
tests/client/test_faults.py) and bench/client.py: `POST /v1/usage` of the contract
(section 2) on a real HTTP server on 127.0.0.1.

What it fakes: a body of NDJSON records, gzipped (`Content-Encoding: gzip`) or not;
with `token` set, 401 without `Authorization: Bearer <token>`; 400 for a body that
does not decode; each `request_id` stored once, as the real service does (a later
one, in the same body or another, is counted a duplicate and not stored again);
200 with `{"accepted", "duplicates", "rejected", "errors"}`, after the records are
stored. A slow answer is stored first, then late: a client that timed out and
posts again gets duplicates, as from the real service.

What it answers is scripted two ways:

* a mode (`set_mode`): "ok"; "503" with `Retry-After: retry_after`; "429"; "slow"
  (200 after `slow_s`); "down" (`stop()`: nothing listens on the port, and the
  connections kept alive are closed too, else a client's pooled connection would
  still be answered; `start()` listens again on the same port);
* one-off `Answer`s (status, headers, delay), queued by `answer()` and taken one a
  post before the mode's.

The server speaks HTTP/1.1 with keep-alive, as a real one. What it saw: `store`
(request_id -> its record, once), `posted` (request_id -> how many 200-answered
posts carried it) and `posts` (every post, with its status).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from service.server_process import free_port

MODES = ("ok", "503", "429", "slow", "down")


@dataclass(frozen=True)
class Answer:
    """One post's answer: `status` (200: the records are stored and counted, as
    the real service does) with `headers`, after `delay_s` (stored first)."""

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass
class Post:
    """One post as received: when (`time.monotonic()`), its headers (lower-cased
    names), its body as sent, its records, and the status it was answered."""

    at: float
    headers: dict[str, str]
    body: bytes
    records: list[dict[str, Any]]
    status: int


@dataclass
class FakeCachewatch:
    """`POST /v1/usage` on 127.0.0.1:`port` (see the module's docstring). Not
    listening ("down") until `start()`."""

    port: int = field(default_factory=free_port)
    #: When set, a post without `Authorization: Bearer <token>` is answered 401.
    token: str | None = None
    mode: str = "down"
    retry_after: str = "1"
    slow_s: float = 2.0
    #: request_id -> its record, as first stored.
    store: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: request_id -> how many 200-answered posts carried it (the first stored it,
    #: later ones were counted `duplicates`).
    posted: Counter[str] = field(default_factory=Counter)
    posts: list[Post] = field(default_factory=list)
    script: deque[Answer] = field(default_factory=deque)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _server: _Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # --- scripting ---------------------------------------------------------------------

    def answer(self, *answers: Answer) -> None:
        """The next posts' answers, one each, before the mode's."""
        with self.lock:
            self.script.extend(answers)

    def set_mode(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"no mode {mode!r}: {MODES}")
        if mode == "down":
            self.stop()
        else:
            self.start()
        self.mode = mode

    def mode_answer(self) -> Answer:
        mode = self.mode
        if mode == "503":
            return Answer(503, {"Retry-After": self.retry_after})
        if mode == "429":
            return Answer(429)
        if mode == "slow":
            return Answer(200, delay_s=self.slow_s)
        return Answer(200)

    # --- what it saw -------------------------------------------------------------------

    def statuses(self) -> list[int]:
        """Each post's status, in order."""
        with self.lock:
            return [post.status for post in self.posts]

    def counts(self) -> tuple[Counter[str], Counter[int]]:
        """Copies of `posted` and of how many posts were answered each status."""
        with self.lock:
            return Counter(self.posted), Counter(post.status for post in self.posts)

    def forget(self) -> None:
        """Forget every record and post (the stored request_ids too)."""
        with self.lock:
            self.store.clear()
            self.posted.clear()
            self.posts.clear()

    # --- up and down -------------------------------------------------------------------

    def start(self) -> FakeCachewatch:
        """Listen on `port` (again); "down" becomes "ok", another mode is kept."""
        if self._server is None:
            server = _Server(("127.0.0.1", self.port), _handler(self))
            threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True).start()
            self._server = server
        if self.mode == "down":
            self.mode = "ok"
        return self

    def stop(self) -> None:
        """Down: the port closed, and the connections kept alive closed too."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server.close_connections()
            self._server = None
        self.mode = "down"

    # --- one post ----------------------------------------------------------------------

    def handle(
        self, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        """One post's status, extra headers and payload (`headers`' names lower-cased)."""
        if path != "/v1/usage":
            return 404, {}, b'{"detail":"Not Found"}'
        with self.lock:
            answer = self.script.popleft() if self.script else self.mode_answer()
        wanted = None if self.token is None else f"Bearer {self.token}"
        if answer.status == 200 and wanted is not None and headers.get("authorization") != wanted:
            answer = Answer(401)
        try:
            raw = gzip.decompress(body) if headers.get("content-encoding") == "gzip" else body
            records = [json.loads(line) for line in raw.splitlines() if line.strip()]
        except (OSError, EOFError, ValueError):
            records, answer = [], Answer(400)
        counts: dict[str, Any] = {"accepted": 0, "duplicates": 0, "rejected": 0, "errors": []}
        with self.lock:
            self.posts.append(Post(time.monotonic(), headers, body, records, answer.status))
            if answer.status == 200:
                for index, record in enumerate(records):
                    rid = record.get("request_id") if isinstance(record, dict) else None
                    if not isinstance(rid, str):
                        counts["rejected"] += 1
                        error = {"index": index, "request_id": None, "error": "no request_id"}
                        counts["errors"].append(error)
                        continue
                    self.posted[rid] += 1
                    if rid in self.store:
                        counts["duplicates"] += 1
                    else:
                        self.store[rid] = record
                        counts["accepted"] += 1
        time.sleep(answer.delay_s)  # a slow answer: stored (committed), then late
        if answer.status == 200:
            payload = json.dumps(counts).encode()
        else:
            payload = json.dumps({"detail": _phrase(answer.status)}).encode()
        return answer.status, dict(answer.headers), payload


def _phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return f"status {status}"


def _handler(fake: FakeCachewatch) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a real server

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            headers = {name.lower(): value for name, value in self.headers.items()}
            # `fake.handle` looked up on each post: a test may wrap it.
            status, extra, payload = fake.handle(self.path, headers, body)
            self.send_response(status)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


class _Server(ThreadingHTTPServer):
    """Keeps its open connections, to close them when going down."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.connections: set[socket.socket] = set()
        self.connections_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.connections_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.connections_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        with self.connections_lock:
            connections, self.connections = self.connections, set()
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that timed out and left: nothing to report
