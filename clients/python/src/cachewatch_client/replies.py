"""What a provider answered, reduced to what a record needs: the response's id, the
model that answered and the provider's `usage` object, as sent.

Three APIs, each answered whole (one JSON body) or streamed (server-sent events):

- OpenAI Chat Completions: `usage` in the body; streamed, in the last chunk when
  the request asked for it (`stream_options: {"include_usage": true}`), else
  nowhere: such a call is counted `skipped`, never guessed.
- OpenAI Responses: `usage` in the body; streamed, in the `response` of the
  `response.completed` (or `.incomplete`, `.failed`) event.
- Anthropic Messages: `usage` in the body; streamed, `message_start` carries the
  input side (input, cache read, cache write) and each `message_delta` the counts
  so far (output tokens, and on newer API versions the input side again): the
  later value of a field wins.

`SseUsage` is fed the decoded body of a streamed answer chunk by chunk, on the
application's thread: it only splits events and keeps the few whose data mention
`"usage"` (a handful a stream). JSON is parsed later, on the shipper's thread.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

#: The APIs recorded, by the end of the path they are posted to.
API_PATHS: Final = {
    "/chat/completions": "chat",
    "/responses": "responses",
    "/messages": "messages",
}
#: Content encodings the client can undo with the standard library: instrumented
#: requests ask only for these (module `transport`).
ENCODINGS: Final = "gzip, deflate"
_USAGE = b'"usage"'


@dataclass(frozen=True)
class Reply:
    response_id: str | None
    model: str | None
    usage: Mapping[str, Any] | None


def api_of(method: str, path: str) -> str | None:
    """The API a request calls, or None for any other request (files, models,
    token counting, batches...)."""
    if method != "POST":
        return None
    path = path.rstrip("/")
    for suffix, api in API_PATHS.items():
        if path.endswith(suffix):
            return api
    return None


def reply_of_body(body: bytes) -> Reply:
    """A whole JSON answer of any of the three APIs."""
    answer = json.loads(body)
    return _reply(answer)


def reply_of_events(api: str, events: list[bytes]) -> Reply:
    """A streamed answer, from the data of the events `SseUsage` kept."""
    reply = Reply(None, None, None)
    for data in events:
        try:
            event = json.loads(data)
        except ValueError:
            continue
        if isinstance(event, dict):
            reply = _merge(api, reply, event)
    return reply


def reply_of_object(response: Any) -> Reply:
    """What the user's own call returned: an SDK response object, its dict, or the
    bare `usage` object."""
    if hasattr(response, "model_dump"):
        response = response.model_dump(mode="json", exclude_none=True)
    if not isinstance(response, Mapping):
        raise TypeError(f"a response must be a dict or an SDK object, not {type(response)}")
    if "usage" in response or "usageMetadata" in response:
        return _reply(response)
    return Reply(None, None, dict(response))


def _reply(answer: Any) -> Reply:
    if not isinstance(answer, Mapping):
        return Reply(None, None, None)
    usage = answer.get("usage") or answer.get("usageMetadata")
    return Reply(
        _text(answer.get("id")),
        _text(answer.get("model")),
        usage if isinstance(usage, Mapping) else None,
    )


def _merge(api: str, reply: Reply, event: Mapping[str, Any]) -> Reply:
    kind = event.get("type")
    if api == "responses":
        if isinstance(kind, str) and kind.startswith("response.") and "response" in event:
            found = _reply(event["response"])
            return found if found.usage is not None else _with_ids(reply, found)
        return reply
    if api == "messages":
        if kind == "message_start":
            return _reply(event.get("message"))
        usage = event.get("usage")
        if kind == "message_delta" and isinstance(usage, Mapping):
            merged = {**(reply.usage or {}), **{k: v for k, v in usage.items() if v is not None}}
            return Reply(reply.response_id, reply.model, merged)
        return reply
    found = _reply(event)  # a chat completion chunk
    return found if found.usage is not None else _with_ids(reply, found)


def _with_ids(reply: Reply, found: Reply) -> Reply:
    return Reply(reply.response_id or found.response_id, reply.model or found.model, reply.usage)


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


class SseUsage:
    """The events of a streamed answer that carry `usage` (module docstring)."""

    def __init__(self) -> None:
        self.events: list[bytes] = []
        self._pending = b""

    def feed(self, chunk: bytes) -> None:
        text = self._pending + chunk
        # Events end with a blank line; "\r\n" line ends are normalised first.
        if b"\r" in text:
            text = text.replace(b"\r\n", b"\n")
        *complete, self._pending = text.split(b"\n\n")
        for event in complete:
            if _USAGE in event:
                self._keep(event)

    def close(self) -> None:
        if _USAGE in self._pending:
            self._keep(self._pending)
        self._pending = b""

    def _keep(self, event: bytes) -> None:
        data = [line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:")]
        if data:
            self.events.append(b"\n".join(data))


class Decoder:
    """Undoes the answer's `Content-Encoding` (gzip or deflate, the ones the client
    asks for); any other encoding gives nothing (`failed`)."""

    def __init__(self, encoding: str) -> None:
        encoding = encoding.strip().lower()
        self.failed = False
        self._zlib: Any = None
        if encoding == "gzip":
            self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            self._zlib = zlib.decompressobj()
        elif encoding not in ("", "identity"):
            self.failed = True

    def decode(self, chunk: bytes) -> bytes:
        if self.failed:
            return b""
        if self._zlib is None:
            return chunk
        try:
            return bytes(self._zlib.decompress(chunk))
        except zlib.error:
            self.failed = True
            return b""
