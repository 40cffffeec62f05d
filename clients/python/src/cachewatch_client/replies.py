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
a `"usage"` that is not null (a handful a stream). JSON is parsed later, on the
shipper's thread.
"""

from __future__ import annotations

import json
import re
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
_NO_USAGE = re.compile(rb'"usage"\s*:\s*null')
#: Where an answer carries its usage object, looked at in this order: Gemini's is
#: `usageMetadata` (REST) or `usage_metadata` (its SDK's objects). A record carries
#: it under the same key (contract section 1), where cachewatch reads its shape.
USAGE_KEYS: Final = ("usage", "usageMetadata", "usage_metadata")
#: Keys of an answer that no usage object has: a dict with one of them and no
#: usage is an answer without usage (skipped), not a bare usage object.
_ANSWER_KEYS: Final = frozenset(
    {"id", "model", "object", "type", "choices", "content", "output", "candidates"}
    | {"responseId", "response_id", "modelVersion", "model_version"}
)


@dataclass(frozen=True)
class Reply:
    response_id: str | None
    model: str | None
    usage: Mapping[str, Any] | None
    #: The key the answer had `usage` under (`USAGE_KEYS`).
    usage_key: str = "usage"


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
    bare `usage` object. An answer without usage (an engine that sends none) has
    none: it is skipped, never read as a usage object."""
    if hasattr(response, "model_dump"):
        response = response.model_dump(mode="json", exclude_none=True)
    if not isinstance(response, Mapping):
        raise TypeError(f"a response must be a dict or an SDK object, not {type(response)}")
    if any(key in response for key in USAGE_KEYS) or not _ANSWER_KEYS.isdisjoint(response):
        return _reply(response)
    return Reply(None, None, dict(response), _bare_usage_key(response))


def _reply(answer: Any) -> Reply:
    if not isinstance(answer, Mapping):
        return Reply(None, None, None)
    response_id = _first_text(answer, "id", "responseId", "response_id")
    model = _first_text(answer, "model", "modelVersion", "model_version")
    for key in USAGE_KEYS:
        usage = answer.get(key)
        if isinstance(usage, Mapping):
            return Reply(response_id, model, usage, key)
    return Reply(response_id, model, None)


def _bare_usage_key(usage: Mapping[str, Any]) -> str:
    """Where a record carries this bare usage object: Gemini's under its own key."""
    if "promptTokenCount" in usage:
        return "usageMetadata"
    if "prompt_token_count" in usage:
        return "usage_metadata"
    return "usage"


def _first_text(answer: Mapping[str, Any], *keys: str) -> str | None:
    return next((v for v in map(_text, map(answer.get, keys)) if v is not None), None)


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
            return Reply(reply.response_id, reply.model, merged, reply.usage_key)
        return reply
    found = _reply(event)  # a chat completion chunk
    return found if found.usage is not None else _with_ids(reply, found)


def _with_ids(reply: Reply, found: Reply) -> Reply:
    return Reply(
        reply.response_id or found.response_id,
        reply.model or found.model,
        reply.usage,
        reply.usage_key,
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


class SseUsage:
    """The events of a streamed answer that carry `usage` (module docstring). The
    text after the last complete event is kept, and only what a chunk adds to it
    is searched for an event's end: an event arriving in many small chunks costs
    its length, not its length times the chunks."""

    def __init__(self) -> None:
        self.events: list[bytes] = []
        self._pending = bytearray()

    def feed(self, chunk: bytes) -> None:
        pending = self._pending
        # Events end with a blank line ("\r\n" line ends are normalised): a
        # boundary may straddle the chunk, so the search starts 3 bytes back.
        searched = max(0, len(pending) - 3)
        pending += chunk
        if b"\r" in chunk or pending[searched : searched + 3].find(b"\r") != -1:
            pending[:] = pending.replace(b"\r\n", b"\n")
            searched = 0
        end = pending.rfind(b"\n\n", searched)
        if end == -1:
            return
        for event in bytes(pending[:end]).split(b"\n\n"):
            if _carries_usage(event):
                self._keep(event)
        del pending[: end + 2]

    def close(self) -> None:
        if _carries_usage(bytes(self._pending)):
            self._keep(bytes(self._pending))
        self._pending.clear()

    def _keep(self, event: bytes) -> None:
        data = [line[5:].lstrip() for line in event.split(b"\n") if line.startswith(b"data:")]
        if data:
            self.events.append(b"\n".join(data))


def _carries_usage(event: bytes) -> bool:
    """Whether an event mentions a `"usage"` that is not null: with `include_usage`
    every Chat Completions chunk says `"usage": null`, and only the last one counts."""
    if _USAGE not in event:
        return False
    return event.count(_USAGE) > len(_NO_USAGE.findall(event))


class Decoder:
    """Undoes the answer's `Content-Encoding` (gzip or deflate, the ones the client
    asks for); any other encoding gives nothing (`failed`)."""

    def __init__(self, encoding: str) -> None:
        encoding = encoding.strip().lower()
        self.failed = False
        self._zlib: Any = None
        #: Deflate comes zlib-wrapped, or raw from some servers (httpx reads both):
        #: a first chunk without zlib's header is read again as raw.
        self._may_be_raw = False
        if encoding == "gzip":
            self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            self._zlib = zlib.decompressobj()
            self._may_be_raw = True
        elif encoding not in ("", "identity"):
            self.failed = True

    def decode(self, chunk: bytes) -> bytes:
        if self.failed:
            return b""
        if self._zlib is None:
            return chunk
        try:
            data = bytes(self._zlib.decompress(chunk))
        except zlib.error:
            if self._may_be_raw:
                self._may_be_raw = False
                self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
                return self.decode(chunk)
            self.failed = True
            return b""
        self._may_be_raw = False
        return data
