"""A local stand-in for a Slack incoming webhook, for the demo and for trying alerts
without a Slack workspace: it answers like Slack (`ok`) and appends every message to
a JSON-lines file, so what would have been posted can be read afterwards."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route


@dataclass
class SlackSink:
    """A running sink: POST Slack messages to `url`; they land in `path`."""

    url: str
    path: Path
    server: uvicorn.Server
    thread: threading.Thread

    def messages(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [orjson.loads(line) for line in self.path.read_bytes().splitlines() if line]

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def _app(path: Path) -> Starlette:
    lock = threading.Lock()

    async def receive(request: Request) -> PlainTextResponse:
        try:
            payload = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return PlainTextResponse("invalid_payload", status_code=400)
        if not isinstance(payload, dict) or not (payload.get("text") or payload.get("blocks")):
            return PlainTextResponse("no_text", status_code=400)
        with lock, path.open("ab") as out:
            out.write(orjson.dumps(payload) + b"\n")
        return PlainTextResponse("ok")

    return Starlette(routes=[Route("/", receive, methods=["POST"])])


def start_slack_sink(path: Path, port: int) -> SlackSink:
    """Serve the sink on 127.0.0.1:`port` in a background thread."""
    config = uvicorn.Config(_app(path), host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="slack-sink", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"the local Slack sink did not start on port {port}")
        time.sleep(0.02)
    return SlackSink(f"http://127.0.0.1:{port}/", path, server, thread)


def message_headline(payload: dict[str, Any]) -> str:
    """The first line a Slack user would see: the fallback text."""
    text = str(payload.get("text") or "")
    return text.splitlines()[0] if text else "(blocks only)"
