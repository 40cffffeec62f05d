"""A fake OpenAI + Anthropic HTTP server on loopback for the real `openai` and
`anthropic` SDKs: `POST /v1/chat/completions`, `POST /v1/responses` and
`POST /v1/messages`, each non-streamed (JSON) or streamed (`"stream": true`, SSE).

    with fake_providers() as fake:
        client = openai.OpenAI(base_url=fake.openai_base_url, api_key="x")
        anthropic.Anthropic(base_url=fake.anthropic_base_url, api_key="x")

Token rule (deterministic, per API and model):

* The *prompt text* of a request is the canonical JSON (sorted keys, separators
  `,` and `:`, no ASCII escaping) of the list of `[key, value]` pairs, in this order,
  of the keys it has among `tools`, `system`, `instructions`, `messages`, `input`,
  with every `cache_control` key removed (moving a breakpoint changes no prompt).
* prompt tokens = len(prompt text) // 4; completion tokens = max(1, len(reply) // 4).
* cached tokens = the longest common prefix, in characters, between this prompt text
  and the prompt text of any earlier successful request of the same API and model,
  // 4, rounded down to a multiple of 16, capped at the prompt tokens.
* OpenAI: prompt_tokens / input_tokens = prompt tokens, cached_tokens = cached.
* Anthropic: written = prompt - cached when the body holds a `cache_control` anywhere
  (else 0); input_tokens = prompt - cached - written, cache_read_input_tokens = cached,
  cache_creation_input_tokens = written.

Every answer (failures too) is kept as a `Served` record in `fake.served`. Controls:
`delay_first_byte_s`, `chunk_gap_s`, `reply`, `fail_next(status, n)`, `reset()`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from service.server_process import free_port

Api = Literal["chat", "responses", "messages"]
Json = dict[str, Any]

PROMPT_KEYS = ("tools", "system", "instructions", "messages", "input")
CACHE_GRANULARITY = 16
DEFAULT_REPLY = "Hello from the fake provider, one token at a time."
_ID_PREFIX: dict[Api, str] = {"chat": "chatcmpl-", "responses": "resp_", "messages": "msg_"}
_ANTHROPIC_ERRORS = {400: "invalid_request_error", 401: "authentication_error",
    403: "permission_error", 404: "not_found_error", 413: "request_too_large",
    429: "rate_limit_error", 529: "overloaded_error"}  # fmt: skip


@dataclass(frozen=True)
class Served:
    """One answered request. `usage` is the usage the answer carried (for a Chat
    Completions stream without include_usage: the one it would have carried); `{}`
    and `response_id == ""` for an injected failure."""

    api: Api
    body: Json
    response_id: str
    usage: Json
    stream: bool
    first_byte: float
    headers: dict[str, str]
    status: int = 200


@dataclass(frozen=True)
class Tokens:
    prompt: int
    cached: int
    written: int
    completion: int


def prompt_text(body: Json) -> str:
    pairs = [[key, _without_cache_control(body[key])] for key in PROMPT_KEYS if key in body]
    return json.dumps(pairs, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _without_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_cache_control(v) for v in value]
    return value


def _has_cache_control(value: Any) -> bool:
    if isinstance(value, dict):
        return "cache_control" in value or any(_has_cache_control(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_cache_control(v) for v in value)
    return False


def cached_tokens(text: str, earlier: list[str]) -> int:
    common = max((_common_prefix_len(text, old) for old in earlier), default=0)
    tokens = common // 4 // CACHE_GRANULARITY * CACHE_GRANULARITY
    return min(tokens, len(text) // 4)


def _common_prefix_len(a: str, b: str) -> int:
    differ = (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y)
    return next(differ, min(len(a), len(b)))


def usage_for(api: Api, tokens: Tokens) -> Json:
    """The usage object `api` reports for `tokens`."""
    p, c = tokens.prompt, tokens.completion
    if api == "chat":
        return {
            "prompt_tokens": p,
            "completion_tokens": c,
            "total_tokens": p + c,
            "prompt_tokens_details": {"cached_tokens": tokens.cached},
            "completion_tokens_details": {"reasoning_tokens": 0},
        }
    if api == "responses":
        return {
            "input_tokens": p,
            "input_tokens_details": {"cached_tokens": tokens.cached},
            "output_tokens": c,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": p + c,
        }
    return {
        "input_tokens": p - tokens.cached - tokens.written,
        "output_tokens": c,
        "cache_read_input_tokens": tokens.cached,
        "cache_creation_input_tokens": tokens.written,
    }


def split_reply(reply: str) -> list[str]:
    """The stream deltas of `reply`: one per word, with its trailing spaces."""
    return re.findall(r"\s*\S+\s*", reply) or [reply]


def sse(data: Json, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


# --- OpenAI Chat Completions ------------------------------------------------------------


def chat_completion(rid: str, model: str, reply: str, usage: Json) -> Json:
    message = {"role": "assistant", "content": reply, "refusal": None}
    choice = {"index": 0, "message": message, "finish_reason": "stop", "logprobs": None}
    return {**_chat_head(rid, model, "chat.completion"), "choices": [choice], "usage": usage}


def chat_stream(rid: str, model: str, reply: str, usage: Json, body: Json) -> list[bytes]:
    head = _chat_head(rid, model, "chat.completion.chunk")

    def chunk(delta: Json, finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return sse({**head, "choices": [choice]})

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": piece}) for piece in split_reply(reply)]
    events.append(chunk({}, "stop"))
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append(sse({**head, "choices": [], "usage": usage}))
    return [*events, b"data: [DONE]\n\n"]


def _chat_head(rid: str, model: str, obj: str) -> Json:
    return {"id": rid, "object": obj, "created": int(time.time()), "model": model}


# --- OpenAI Responses -------------------------------------------------------------------


def response_object(rid: str, body: Json, reply: str | None, usage: Json | None) -> Json:
    """The Response; `reply is None` for the in-progress one a stream starts with."""
    return {
        "id": rid,
        "object": "response",
        "created_at": time.time(),
        "status": "in_progress" if reply is None else "completed",
        "model": body.get("model", ""),
        "output": [] if reply is None else [output_message(rid, reply, "completed")],
        "parallel_tool_calls": True,
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools", []),
        "instructions": body.get("instructions"),
        "metadata": {},
        "error": None,
        "incomplete_details": None,
        "text": {"format": {"type": "text"}},
        "usage": usage,
    }


def output_message(rid: str, text: str | None, status: str) -> Json:
    content = [] if text is None else [output_text(text)]
    return {
        "id": f"msg_{rid}",
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def output_text(text: str) -> Json:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def responses_stream(rid: str, body: Json, reply: str, usage: Json) -> list[bytes]:
    at = {"item_id": f"msg_{rid}", "output_index": 0, "content_index": 0}
    events: list[tuple[str, Json]] = [
        ("response.created", {"response": response_object(rid, body, None, None)}),
        (
            "response.output_item.added",
            {"output_index": 0, "item": output_message(rid, None, "in_progress")},
        ),
        ("response.content_part.added", {**at, "part": output_text("")}),
        *[
            ("response.output_text.delta", {**at, "delta": piece, "logprobs": []})
            for piece in split_reply(reply)
        ],
        ("response.output_text.done", {**at, "text": reply, "logprobs": []}),
        ("response.content_part.done", {**at, "part": output_text(reply)}),
        (
            "response.output_item.done",
            {"output_index": 0, "item": output_message(rid, reply, "completed")},
        ),
        ("response.completed", {"response": response_object(rid, body, reply, usage)}),
    ]
    return [
        sse({"type": kind, "sequence_number": n, **data}, kind)
        for n, (kind, data) in enumerate(events)
    ]


# --- Anthropic Messages -----------------------------------------------------------------


def anthropic_message(rid: str, model: str, reply: str | None, usage: Json) -> Json:
    """The Message; `reply is None` for the empty one `message_start` carries."""
    return {
        "id": rid,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [] if reply is None else [{"type": "text", "text": reply}],
        "stop_reason": None if reply is None else "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }


def messages_stream(rid: str, model: str, reply: str, usage: Json) -> list[bytes]:
    start_usage = {**usage, "output_tokens": 1}
    events: list[Json] = [
        {"type": "message_start", "message": anthropic_message(rid, model, None, start_usage)},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "ping"},
        *[
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}
            for t in split_reply(reply)
        ],
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": usage["output_tokens"]},
        },
        {"type": "message_stop"},
    ]
    return [sse(event, event["type"]) for event in events]


def error_body(api: Api, status: int) -> Json:
    message = f"fake provider failure {status}"
    if api == "messages":
        kind = _ANTHROPIC_ERRORS.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    code = "rate_limit_exceeded" if status == 429 else None
    kind = "invalid_request_error" if status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


# --- The server -------------------------------------------------------------------------


@dataclass
class FakeProviders:
    """The fake's state and controls; `url` is set once it listens."""

    url: str = ""
    delay_first_byte_s: float = 0.0
    chunk_gap_s: float = 0.0
    reply: str = DEFAULT_REPLY
    retry_after_ms: int = 10
    _served: list[Served] = field(default_factory=list)
    _prompts: dict[tuple[Api, str], list[str]] = field(default_factory=dict)
    _failures: list[int] = field(default_factory=list)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    @property
    def served(self) -> list[Served]:
        """A snapshot of the records so far, oldest first."""
        with self._lock:
            return list(self._served)

    def fail_next(self, status: int, n: int = 1) -> None:
        """Answer the next `n` requests (any API) with `status` and a provider-shaped
        error, with `retry-after-ms: retry_after_ms` so SDK retries are quick."""
        with self._lock:
            self._failures.extend([status] * n)

    def reset(self) -> None:
        """Forget served requests, seen prompts and pending failures; reset controls."""
        with self._lock:
            self._served.clear()
            self._prompts.clear()
            self._failures.clear()
        self.delay_first_byte_s = self.chunk_gap_s = 0.0
        self.reply, self.retry_after_ms = DEFAULT_REPLY, 10

    def tokens(self, api: Api, body: Json) -> Tokens:
        """Counts `body` under the module's rule and remembers its prompt."""
        text = prompt_text(body)
        key = (api, str(body.get("model", "")))
        with self._lock:
            earlier = self._prompts.setdefault(key, [])
            cached = cached_tokens(text, earlier)
            earlier.append(text)
        prompt = len(text) // 4
        written = prompt - cached if api == "messages" and _has_cache_control(body) else 0
        return Tokens(prompt, cached, written, max(1, len(self.reply) // 4))

    async def answer(self, api: Api, request: Request) -> Response:
        body: Json = await request.json()
        headers = dict(request.headers)
        with self._lock:
            status = self._failures.pop(0) if self._failures else None
            rid = f"{_ID_PREFIX[api]}{next(self._ids)}"
        if status is not None:
            failed = Served(api, body, "", {}, bool(body.get("stream")), 0.0, headers, status)
            self._record(failed, time.time())
            retry = {"retry-after-ms": str(self.retry_after_ms)}
            return JSONResponse(error_body(api, status), status, headers=retry)
        usage = usage_for(api, self.tokens(api, body))
        record = Served(api, body, rid, usage, bool(body.get("stream")), 0.0, headers)
        if record.stream:
            chunks = self._stream_chunks(api, rid, body, usage)
            return StreamingResponse(self._drip(chunks, record), media_type="text/event-stream")
        await asyncio.sleep(self.delay_first_byte_s)
        self._record(record, time.time())
        return JSONResponse(self._payload(api, rid, body, usage))

    def _payload(self, api: Api, rid: str, body: Json, usage: Json) -> Json:
        model = str(body.get("model", ""))
        if api == "chat":
            return chat_completion(rid, model, self.reply, usage)
        if api == "responses":
            return response_object(rid, body, self.reply, usage)
        return anthropic_message(rid, model, self.reply, usage)

    def _stream_chunks(self, api: Api, rid: str, body: Json, usage: Json) -> list[bytes]:
        model = str(body.get("model", ""))
        if api == "chat":
            return chat_stream(rid, model, self.reply, usage, body)
        if api == "responses":
            return responses_stream(rid, body, self.reply, usage)
        return messages_stream(rid, model, self.reply, usage)

    async def _drip(self, chunks: list[bytes], record: Served) -> AsyncIterator[bytes]:
        await asyncio.sleep(self.delay_first_byte_s)
        self._record(record, time.time())
        for n, chunk in enumerate(chunks):
            if n and self.chunk_gap_s:
                await asyncio.sleep(self.chunk_gap_s)
            yield chunk

    def _record(self, record: Served, first_byte: float) -> None:
        with self._lock:
            self._served.append(replace(record, first_byte=first_byte))


_PATHS: dict[Api, str] = {
    "chat": "/v1/chat/completions",
    "responses": "/v1/responses",
    "messages": "/v1/messages",
}


def build_app(fake: FakeProviders) -> FastAPI:
    app = FastAPI()
    for api, path in _PATHS.items():
        app.add_api_route(path, _route(fake, api), methods=["POST"])
    return app


def _route(fake: FakeProviders, api: Api) -> Callable[[Request], Awaitable[Response]]:
    async def route(request: Request) -> Response:
        return await fake.answer(api, request)

    return route


@contextmanager
def fake_providers(timeout_s: float = 10.0) -> Iterator[FakeProviders]:
    """A `FakeProviders` served by uvicorn on a free loopback port in a background
    thread, for the duration of the `with`."""
    fake = FakeProviders()
    port = free_port()
    config = uvicorn.Config(
        build_app(fake),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="off",
        timeout_graceful_shutdown=2,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="fake-providers", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the fake providers did not start on port {port}")
        time.sleep(0.01)
    fake.url = f"http://127.0.0.1:{port}"
    try:
        yield fake
    finally:
        server.should_exit = True
        thread.join(timeout_s)
