"""Coding agents' own OpenTelemetry log events -> usage records (docs/integrations.md,
"Coding agents"). The agents' code cannot be changed; their telemetry can be pointed
at cachewatch.

**Claude Code** (`CLAUDE_CODE_ENABLE_TELEMETRY=1`, `OTEL_LOGS_EXPORTER=otlp`; its
"Monitoring" page) logs one `claude_code.api_request` event per call to the Messages
API: the log record's body is the event name, its attribute `event.name` the bare
name (`api_request`); either is recognised. Read from it, as the page names them:
`model`, `input_tokens`, `cache_read_tokens`, `cache_creation_tokens`,
`output_tokens`, `duration_ms`, `request_id`, `query_source`, `speed`, `effort`,
`cost_usd`, `event.sequence`, and the standard attributes `session.id`,
`app.version`, `user.email`, `user.account_uuid`, `user.id`, `organization.id` (on
the log record or on the resource: both are read, the record's first). Versions
before 2.1.122 sent the numbers as strings: a string that spells a number is read
as that number (anything else is passed on, and validation rejects the record and
says which field).

With `OTEL_LOG_RAW_API_BODIES=1` each attempt also logs
`claude_code.api_request_body`, whose `body` attribute is the request's JSON, cut at
60 KB (`body_truncated`). Its fingerprint (`cachewatch_client.fingerprint`) goes to the next
`api_request` of the same session, thread (`query_source`) and model
(`RequestBodies`): a whole body gives every fingerprint field; a cut one only the
segments of its static start (`tools` and `system`, when both are whole), which
is what names a volatile system prompt or tool list without claiming a prefix the
body does not show.

Without a whole body, a session's calls get blocks inferred from their usage
(`service.ingest.usage_blocks`): an append-only history as long as usage shows
nothing else, so a pause past the TTL is an `expiry` rewarm and a compaction a
history rewrite.

**Gemini CLI** (`gemini_cli.api_response`) and **Codex** (`codex.sse_event` of kind
`response.completed`) document their token counts in their own telemetry pages;
they are mapped the same way (`gemini_cli_record`, `codex_record`).
"""

import math
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import orjson
import pydantic_core

from cachewatch_client.fingerprint import fingerprint
from service.ingest.genai import (
    cachewatch_fields,
    fallback_id,
    integral,
    spelled_if_not_finite,
)
from service.ingest.otlp import OtlpItem
from service.ingest.shapes import ANTHROPIC, GOOGLE, OPENAI
from service.ingest.usage_blocks import UsageBlocks, read_usage
from service.profiles import Profiles
from service.profiles.builtins import FIVE_MINUTES_S

CLAUDE_CODE_REQUEST = "claude_code.api_request"
CLAUDE_CODE_BODY = "claude_code.api_request_body"
GEMINI_CLI_RESPONSE = "gemini_cli.api_response"
CODEX_SSE_EVENT = "codex.sse_event"
CODEX_COMPLETED = "response.completed"
#: The tenant: the first of these present (the person, else the organisation).
TENANT_FROM = ("user.email", "user.account_uuid", "user.account_id", "user.id", "organization.id")
#: The event's token counts as the Messages API's usage object names them.
CLAUDE_CODE_USAGE = {
    "input_tokens": "input_tokens",
    "cache_read_tokens": "cache_read_input_tokens",
    "cache_creation_tokens": "cache_creation_input_tokens",
    "output_tokens": "output_tokens",
}
#: Labels kept in the record's `attributes`, when present.
CLAUDE_CODE_LABELS = ("speed", "effort", "organization.id", "cost_usd", "app.entrypoint")
_NUMBER = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?")
_NS_PER_MS = 1_000_000


def event_of(item: OtlpItem) -> str:
    """The coding-agent event this log record is (one of the names above), or ''."""
    name = item.event_name
    declared = item.attributes.get("event.name")
    if CLAUDE_CODE_REQUEST in (name, declared) or (declared == "api_request" and not name):
        return CLAUDE_CODE_REQUEST
    if CLAUDE_CODE_BODY in (name, declared) or (declared == "api_request_body" and not name):
        return CLAUDE_CODE_BODY
    if GEMINI_CLI_RESPONSE in (name, declared):
        return GEMINI_CLI_RESPONSE
    if CODEX_SSE_EVENT in (name, declared) and item.attributes.get("event.kind") == CODEX_COMPLETED:
        return CODEX_SSE_EVENT
    return ""


def number(value: Any) -> Any:
    """A count or duration as sent: a string spelling a number is that number (older
    Claude Code versions), a whole double an int; anything else as it was."""
    if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
        parsed = float(value) if any(c in value for c in ".eE") else int(value)
        value = parsed if not isinstance(parsed, float) or math.isfinite(parsed) else value
    return integral(value)


def _get(item: OtlpItem, name: str) -> Any:
    """An attribute of the record, else of its resource."""
    value = item.attributes.get(name)
    return item.resource.get(name) if value is None else value


def _first(item: OtlpItem, names: tuple[str, ...]) -> Any:
    for name in names:
        value = _get(item, name)
        if value is not None and value != "":
            return value
    return None


def _start_ns(item: OtlpItem, duration_ms: Any) -> int | None:
    """When the call started: the event is logged when it ended."""
    if not item.start_ns:
        return None
    numeric = isinstance(duration_ms, int | float) and not isinstance(duration_ms, bool)
    if numeric and 0 <= duration_ms < 86_400_000:
        return item.start_ns - round(duration_ms * _NS_PER_MS)
    return item.start_ns


def _common(item: OtlpItem, *, session: str, deploy: tuple[str, ...]) -> dict[str, Any]:
    duration = number(_get(item, "duration_ms"))
    record: dict[str, Any] = {
        "service": _get(item, "service.name"),
        "model": _get(item, "model"),
        "session_id": _get(item, session),
        "tenant": _first(item, TENANT_FROM),
        "deploy": _first(item, deploy),
        "latency_ms": duration,
    }
    start = _start_ns(item, duration)
    if start is not None:
        record["ts"] = start
    return record


def claude_code_record(item: OtlpItem) -> dict[str, Any]:
    """The usage record of a `claude_code.api_request` event (before any body's
    fingerprint and the `cachewatch.*` overrides)."""
    record = _common(item, session="session.id", deploy=("app.version", "service.version"))
    record |= {
        "request_id": _get(item, "request_id") or fallback_id(item),
        "provider": ANTHROPIC,
        "scenario": _get(item, "query_source"),
        # The Messages API's own usage object, from which the server derives prompt,
        # cached and written tokens as for any Anthropic record (contract section 1).
        "usage": {
            usage_name: number(_get(item, event_name))
            for event_name, usage_name in CLAUDE_CODE_USAGE.items()
        },
    }
    labels = {name: _get(item, name) for name in CLAUDE_CODE_LABELS}
    record["attributes"] = {k: number(v) for k, v in labels.items() if _is_label(v)} or None
    return record


@dataclass(frozen=True)
class IncludedCounts:
    """An agent event whose input count includes the cached tokens (Gemini's and
    the Responses API's usage), by the names its documentation gives them."""

    session: str
    provider: str
    cached: str
    prompt: str = "input_token_count"
    output: str = "output_token_count"

    def __call__(self, item: OtlpItem) -> dict[str, Any]:
        record = _common(item, session=self.session, deploy=("app.version", "service.version"))
        record |= {
            "request_id": fallback_id(item),
            "provider": self.provider,
            "prompt_tokens": number(_get(item, self.prompt)),
            "cached_tokens": number(_get(item, self.cached)) or 0,
            "completion_tokens": number(_get(item, self.output)),
        }
        return record


#: `gemini_cli.api_response` (Gemini CLI's telemetry page).
gemini_cli_record = IncludedCounts("session.id", GOOGLE, cached="cached_content_token_count")
#: `codex.sse_event` of kind `response.completed` (Codex's config docs).
codex_record = IncludedCounts("conversation.id", OPENAI, cached="cached_token_count")


_MAPPINGS: dict[str, Any] = {
    CLAUDE_CODE_REQUEST: claude_code_record,
    GEMINI_CLI_RESPONSE: gemini_cli_record,
    CODEX_SSE_EVENT: codex_record,
}


def to_record(
    item: OtlpItem,
    event: str,
    body: dict[str, Any] | None = None,
    profiles: Profiles | None = None,
) -> dict[str, Any]:
    """The record of a usage event (`event_of`), with a body's fingerprint fields
    and the `cachewatch.*` attributes (which win, as for GenAI spans). `profiles`
    (the server's caching profiles) give the TTL the usage inference weighs pauses
    against, as the analytics will."""
    record = _MAPPINGS[event](item)
    if body:
        record.update(body)
    record.update(cachewatch_fields(item.attributes, item.resource))
    if event == CLAUDE_CODE_REQUEST and "block_hashes" not in record:
        record.update(_inferred_blocks(item, record, profiles))
    return {k: spelled_if_not_finite(v) for k, v in record.items() if v is not None}


def _ttl_s(record: dict[str, Any], profiles: Profiles | None) -> float:
    """The call's TTL as the analytics take it: its `cache_ttl_s`, else its model's
    caching profile's, else Anthropic's five minutes."""
    ttl = record.get("cache_ttl_s")
    if isinstance(ttl, int | float) and _is_count(ttl) and ttl:
        return float(ttl)
    model, provider = record.get("model"), record.get("provider")
    profile = profiles.resolve(model, provider) if profiles and isinstance(model, str) else None
    return profile.ttl_s if profile is not None and profile.ttl_s else FIVE_MINUTES_S


def _inferred_blocks(
    item: OtlpItem, record: dict[str, Any], profiles: Profiles | None
) -> dict[str, Any]:
    """Blocks inferred from the call's usage (`service.ingest.usage_blocks`), for a
    call of a session whose body was not sent; none when its counts are not valid
    (validation then says why)."""
    ts_ns = record.get("ts")
    if not record.get("session_id") or type(ts_ns) is not int:
        return {}
    usage = read_usage(record["usage"], ts_ns / 1e9, _ttl_s(record, profiles))
    inferred = None if usage is None else USAGE_BLOCKS.blocks(_thread_name(item), usage)
    if inferred is None:
        return {}
    fields: dict[str, Any] = {
        "block_size": USAGE_BLOCKS.block_size,
        "block_hashes": inferred.block_hashes,
    }
    if "segments" not in record:  # a cut body's segments are what was seen
        fields["segments"] = [inferred.start]
    return fields


def _is_count(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0


def _is_label(value: Any) -> bool:
    return isinstance(value, str | int | float | bool) and value != ""


# --- request bodies ------------------------------------------------------------------


def body_fields(item: OtlpItem) -> dict[str, Any] | None:
    """The fingerprint fields of an `api_request_body` event's body; None when it has
    none that can be read (file mode: only a path on the user's machine)."""
    text = item.attributes.get("body")
    if not isinstance(text, str):
        return None
    if str(item.attributes.get("body_truncated", "")).lower() == "true":
        return _static_start(text)
    try:
        body = orjson.loads(text)
    except orjson.JSONDecodeError:
        return _static_start(text)  # cut without saying so
    return dict(fingerprint(body)) if isinstance(body, dict) else None


def _static_start(text: str) -> dict[str, Any] | None:
    """The segments of a cut body's `tools` and `system`, when both are whole: the
    last key read may be cut short, so it is left out."""
    try:
        partial = pydantic_core.from_json(text, allow_partial=True)
    except ValueError:
        return None
    if not isinstance(partial, dict) or not partial:
        return None
    partial.pop(next(reversed(partial)))
    if "tools" not in partial or "system" not in partial:
        return None
    static = {"tools": partial["tools"], "system": partial["system"], "messages": []}
    return {"segments": fingerprint(static)["segments"]}


@dataclass
class _Body:
    sequence: float
    fields: dict[str, Any]


class RequestBodies:
    """The latest body of each (session, thread, model) not yet given to a request,
    across export requests (a call longer than the export interval has its body in
    one and its `api_request` in the next), at most `max_keys` of them (the least
    recently seen go first). A body goes to the first `api_request` of its key whose
    `event.sequence` is later (a retried attempt logs a new body: the last one wins).
    In-process: with several API processes behind a balancer, a body and its request
    exported to two of them are not paired (the request is stored without it)."""

    def __init__(self, max_keys: int = 10_000) -> None:
        self._max_keys = max_keys
        self._bodies: OrderedDict[str, _Body] = OrderedDict()
        self._lock = threading.Lock()

    def offer(self, item: OtlpItem, fields: dict[str, Any]) -> None:
        key, sequence = _thread_name(item), _sequence(item)
        with self._lock:
            held = self._bodies.get(key)
            if held is None or held.sequence <= sequence:
                self._bodies[key] = _Body(sequence, fields)
                self._bodies.move_to_end(key)
            while len(self._bodies) > self._max_keys:
                self._bodies.popitem(last=False)

    def take(self, item: OtlpItem) -> dict[str, Any] | None:
        key, sequence = _thread_name(item), _sequence(item)
        with self._lock:
            held = self._bodies.get(key)
            if held is None or held.sequence >= sequence:
                return None
            del self._bodies[key]
            return held.fields


def _thread_name(item: OtlpItem) -> str:
    """A session's thread (`query_source`) with one model: whose bodies and usage
    are followed together."""
    return "/".join(str(_get(item, n)) for n in ("session.id", "query_source", "model"))


def _sequence(item: OtlpItem) -> float:
    """`event.sequence`, else the record's time (both order a session's events)."""
    value = number(item.attributes.get("event.sequence"))
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return float(item.start_ns)


BODIES = RequestBodies()
USAGE_BLOCKS = UsageBlocks()
