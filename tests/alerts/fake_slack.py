"""A fake Slack incoming webhook on loopback: a real HTTP server answering like Slack
(`ok`; `invalid_payload` 400 for a body that is not a valid message; scripted answers
such as 429 with `Retry-After`, 500, 410 `channel_is_archived`)."""

import contextlib
import json
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from slack_sdk.errors import SlackObjectFormationError
from slack_sdk.models.blocks import Block


@dataclass(frozen=True)
class Answer:
    status: int
    body: str
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


OK = Answer(200, "ok")


@dataclass
class Received:
    received_at: float  # time.monotonic() when the request arrived
    answered_at: float  # ... and when its answer went out
    payload: Any
    answer: Answer


def slack_check(payload: Any) -> str | None:
    """What Slack would refuse, as its error code; None when the message is fine."""
    if not isinstance(payload, dict):
        return "invalid_payload"
    if not payload.get("text") and not payload.get("blocks"):
        return "no_text"
    try:
        for block in payload.get("blocks") or []:
            parsed = Block.parse(block)
            if parsed is None:
                return "invalid_blocks"
            parsed.validate_json()
    except (SlackObjectFormationError, TypeError):
        return "invalid_blocks"
    return None


class FakeSlack:
    def __init__(self) -> None:
        self.script: deque[Answer] = deque()
        self.received: list[Received] = []
        # Arrival times, written before the answer (a request still being answered
        # shows here, not in `received`).
        self.arrivals: list[float] = []
        self.lock = threading.Lock()
        self.delay_s = 0.0
        self.barrier: threading.Barrier | None = None
        self.release = threading.Event()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/services/T000/B000/XXXX"

    def answer(self, *answers: Answer) -> None:
        """The next requests get these answers, in order; then `ok`."""
        with self.lock:
            self.script.extend(answers)

    def meet(self, parties: int) -> None:
        """The next `parties` requests wait for each other before being answered:
        proof that that many senders were in flight at once."""
        self.barrier = threading.Barrier(parties, timeout=20)

    @property
    def delivered(self) -> list[Any]:
        """Payloads Slack accepted (answered 200), in arrival order."""
        with self.lock:
            return [r.payload for r in self.received if r.answer.status == 200]

    def requests(self) -> list[Received]:
        with self.lock:
            return list(self.received)

    def _next(self, payload: Any) -> Answer:
        problem = slack_check(payload)
        with self.lock:
            if problem is not None:
                return Answer(400, problem)
            return self.script.popleft() if self.script else OK

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                arrived = time.monotonic()
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    payload: Any = json.loads(raw)
                except ValueError:
                    payload = None
                with fake.lock:
                    fake.arrivals.append(arrived)
                barrier = fake.barrier
                if barrier is not None:
                    with contextlib.suppress(threading.BrokenBarrierError):
                        barrier.wait()
                    fake.barrier = None  # only the first `parties` requests meet
                answer = fake._next(payload)
                delay = answer.delay_s or fake.delay_s
                if delay:
                    fake.release.wait(delay)
                body = answer.body.encode()
                # Recorded before the answer is written: once the sender has it, the
                # test sees the request.
                with fake.lock:
                    fake.received.append(Received(arrived, time.monotonic(), payload, answer))
                self.send_response(answer.status)
                self.send_header("content-type", "text/plain; charset=utf-8")
                self.send_header("content-length", str(len(body)))
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                # The sender may have given up (timeout, killed): Slack would not know.
                with contextlib.suppress(OSError):
                    self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def start(self) -> "FakeSlack":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        if self.barrier is not None:
            self.barrier.abort()
        self.server.shutdown()
        self.server.server_close()
