"""One LLM call as the client saw it, and the usage record it becomes.

A `Call` is what the application's thread hands over: the request as sent (the
exact JSON bytes for an instrumented client), what came back (raw, for the
shipper's thread to parse), the times, and the labels in force. `to_record` runs
on the shipper's thread: it parses, fingerprints and writes contract section 1's
record, so the application's call pays for none of it.

Where the labels come from, first found wins:

- `session_id`: an argument (`instrument(...)`, `record(...)`), the enclosing
  `session()` block, then the request's `prompt_cache_key`;
- `tenant`: an argument, the `session()` block, then the request's
  `metadata.user_id` (Anthropic), `safety_identifier` or `user` (OpenAI);
- `cache_key`: the request's `prompt_cache_key`; `cache_ttl_s`: 86,400 for
  OpenAI's `prompt_cache_retention: "24h"` (Anthropic's one-hour writes are read
  from its `usage` by the service).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .context import Labels
from .fingerprint import fingerprint
from .replies import Reply, reply_of_body, reply_of_events

#: OpenAI's extended retention, in seconds (contract section 1, `cache_ttl_s`).
RETENTION_S = {"24h": 86_400}


@dataclass
class Call:
    """One call, as handed from the application's thread to the shipper's."""

    request: bytes | Mapping[str, Any]
    started: float
    labels: Labels
    service: str
    block_size: int
    api: str | None = None
    #: An instrumented call's answer, raw: its whole body, or its usage events.
    body: bytes | None = None
    events: list[bytes] | None = None
    #: A recorded call's answer, already read.
    reply: Reply | None = None
    first_token: float | None = None
    finished: float | None = None
    request_id: str | None = None
    replica: str | None = None
    prompt_ids: Sequence[int] | None = None
    attributes: Mapping[str, Any] = field(default_factory=dict)

    def size(self) -> int:
        """The bytes this call holds while queued."""
        held = self.request if isinstance(self.request, bytes) else b""
        return len(held) + len(self.body or b"") + sum(map(len, self.events or ()))


def to_record(call: Call) -> dict[str, Any] | None:
    """The usage record of `call`, or None when the answer carried no usage (a
    stream without `include_usage`)."""
    request = _request_body(call.request)
    reply = _reply(call)
    if reply.usage is None:
        return None
    model = request.get("model") or reply.model
    if not isinstance(model, str):
        raise ValueError("the request names no model")
    record: dict[str, Any] = {
        "request_id": call.request_id or reply.response_id or uuid.uuid4().hex,
        "ts": round(call.started, 6),
        "service": call.service,
        "model": model,
        reply.usage_key: dict(reply.usage),
        **_timings(call),
        **_labels(call, request),
        **fingerprint(request, block_size=call.block_size, prompt_ids=call.prompt_ids),
    }
    if call.replica:
        record["replica"] = call.replica
    return record


def _request_body(request: bytes | Mapping[str, Any]) -> Mapping[str, Any]:
    body = json.loads(request) if isinstance(request, bytes) else request
    if not isinstance(body, Mapping):
        raise ValueError("the request body is not a JSON object")
    return body


def _reply(call: Call) -> Reply:
    if call.reply is not None:
        return call.reply
    if call.events is not None:
        return reply_of_events(call.api or "chat", call.events)
    return reply_of_body(call.body or b"null")


def _timings(call: Call) -> dict[str, float]:
    out: dict[str, float] = {}
    if call.first_token is not None:
        out["ttft_ms"] = round(max(0.0, call.first_token - call.started) * 1000, 3)
    if call.finished is not None:
        out["latency_ms"] = round(max(0.0, call.finished - call.started) * 1000, 3)
    return out


def _labels(call: Call, request: Mapping[str, Any]) -> dict[str, Any]:
    labels = call.labels
    cache_key = _text(request.get("prompt_cache_key"))
    found: dict[str, Any] = {
        "session_id": labels.session_id or cache_key,
        "tenant": labels.tenant or _tenant(request),
        "scenario": labels.scenario,
        "deploy": labels.deploy,
        "cache_key": cache_key,
        "cache_ttl_s": RETENTION_S.get(str(request.get("prompt_cache_retention"))),
    }
    attributes = {**labels.attributes, **call.attributes}
    if attributes:
        found["attributes"] = attributes
    return {k: v for k, v in found.items() if v is not None}


def _tenant(request: Mapping[str, Any]) -> str | None:
    metadata = request.get("metadata")
    if isinstance(metadata, Mapping) and _text(metadata.get("user_id")):
        return str(metadata["user_id"])
    return _text(request.get("safety_identifier")) or _text(request.get("user"))


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
