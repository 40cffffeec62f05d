"""Coding agents' log events -> usage records (`service.ingest.agents`): which log
records are usage, the fields read (numbers as strings included), and the request
bodies' fingerprints given to the next request of their thread."""

from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from cachewatch_client.fingerprint import fingerprint
from service.ingest import agents
from service.ingest.otlp import OtlpItem
from service.ingest.usage_blocks import UsageBlocks
from service.profiles import load_profiles

END_NS = 1_764_400_000_000_000_000
STANDARD = {
    "session.id": "sess-1",
    "app.version": "2.1.130",
    "organization.id": "org-1",
    "user.account_uuid": "acc-1",
    "user.email": "alice@example.com",
    "user.id": "anon-1",
    "terminal.type": "vscode",
}
REQUEST = {
    **STANDARD,
    "event.name": "api_request",
    "event.timestamp": "2025-11-29T07:06:40.000Z",
    "event.sequence": 7,
    "model": "claude-sonnet-4-5",
    "cost_usd": 0.0123,
    "duration_ms": 2500,
    "input_tokens": 12,
    "output_tokens": 300,
    "cache_read_tokens": 9000,
    "cache_creation_tokens": 800,
    "request_id": "req_011abc",
    "speed": "normal",
    "query_source": "repl_main_thread",
}
BODY = {
    "model": "claude-sonnet-4-5",
    "system": [{"type": "text", "text": "You are Claude Code. " * 40}],
    "tools": [{"name": n, "description": f"the {n} tool " * 10} for n in ("Bash", "Read")],
    "messages": [{"role": "user", "content": "fix the failing test"}],
    "max_tokens": 32000,
}


def item(attributes: dict[str, Any], name: str = "claude_code.api_request", **kw: Any) -> OtlpItem:
    return OtlpItem(
        attributes=attributes,
        resource=kw.pop("resource", {"service.name": "claude-code"}),
        trace_id="",
        span_id="",
        start_ns=kw.pop("start_ns", END_NS),
        end_ns=0,
        source=LogRecord(),
        event_name=name,
    )


def body_item(body: str, sequence: int, **attrs: Any) -> OtlpItem:
    attributes = {**STANDARD, "event.name": "api_request_body", "event.sequence": sequence}
    attributes |= {"body": body, "model": "claude-sonnet-4-5", "query_source": "repl_main_thread"}
    return item(attributes | attrs, "claude_code.api_request_body")


def test_an_api_request_event_is_a_record_as_computed_by_hand(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(agents, "USAGE_BLOCKS", UsageBlocks())  # no thread seen before
    record = agents.to_record(item(REQUEST), agents.event_of(item(REQUEST)))
    inferred = {"block_size", "block_hashes", "segments"}  # tests/ingest/test_usage_blocks.py
    assert len(record["block_hashes"]) == -(-9812 // record["block_size"])
    assert record["segments"] == [{"name": "system+tools", "hash": "start-0", "tokens": 9812}]
    assert {k: v for k, v in record.items() if k not in inferred} == {
        "request_id": "req_011abc",
        "ts": END_NS - 2_500_000_000,  # started duration_ms before it was logged
        "service": "claude-code",
        "model": "claude-sonnet-4-5",
        "session_id": "sess-1",
        "tenant": "alice@example.com",
        "deploy": "2.1.130",
        "latency_ms": 2500,
        "provider": "anthropic",
        "scenario": "repl_main_thread",
        # The Messages API's usage object: the server derives prompt (12 + 9,000 + 800),
        # cached and written tokens from it (tests/api/test_agent_logs.py checks them).
        "usage": {
            "input_tokens": 12,
            "cache_read_input_tokens": 9000,
            "cache_creation_input_tokens": 800,
            "output_tokens": 300,
        },
        "attributes": {"speed": "normal", "organization.id": "org-1", "cost_usd": 0.0123},
    }


@pytest.mark.parametrize(
    ("body", "attrs", "name"),
    [
        ("claude_code.api_request", {"event.name": "api_request"}, agents.CLAUDE_CODE_REQUEST),
        ("", {"event.name": "api_request"}, agents.CLAUDE_CODE_REQUEST),
        ("", {"event.name": "claude_code.api_request"}, agents.CLAUDE_CODE_REQUEST),
        ("claude_code.api_request_body", {}, agents.CLAUDE_CODE_BODY),
        ("claude_code.api_error", {"event.name": "api_error"}, ""),
        ("claude_code.tool_result", {"event.name": "tool_result"}, ""),
        ("codex.api_request", {"event.name": "api_request"}, ""),  # not Claude Code's
        ("", {"event.name": "gemini_cli.api_response"}, agents.GEMINI_CLI_RESPONSE),
        (
            "",
            {"event.name": "codex.sse_event", "event.kind": "response.completed"},
            "codex.sse_event",
        ),
        ("", {"event.name": "codex.sse_event", "event.kind": "response.output_text.delta"}, ""),
        ("an ordinary log line", {}, ""),
    ],
)
def test_which_log_records_are_usage(body: str, attrs: dict[str, Any], name: str) -> None:
    assert agents.event_of(item(attrs, body)) == name


def test_numbers_sent_as_strings_are_read_as_numbers() -> None:
    """Claude Code before 2.1.122 sent every number as a string."""
    as_strings = {k: str(v) if isinstance(v, int | float) else v for k, v in REQUEST.items()}
    record = agents.to_record(item(as_strings), agents.CLAUDE_CODE_REQUEST)
    assert record["usage"]["cache_read_input_tokens"] == 9000
    assert record["usage"]["input_tokens"] == 12 and len(record["block_hashes"]) > 0
    assert record["latency_ms"] == 2500 and record["ts"] == END_NS - 2_500_000_000
    assert record["attributes"]["cost_usd"] == 0.0123
    assert agents.number(" 12 ") == 12 and agents.number("1e3") == 1000
    for kept in ("twelve", "", "0x10", "nan", "1e999", True, None):
        assert agents.number(kept) == kept  # validation says what is wrong with it


def test_standard_attributes_on_the_resource_and_overrides() -> None:
    """The standard attributes may sit on the resource; `cachewatch.*` (a team's
    OTEL_RESOURCE_ATTRIBUTES) wins, as for GenAI spans."""
    attrs = {k: v for k, v in REQUEST.items() if k not in STANDARD}
    resource = {
        "service.name": "claude-code",
        **STANDARD,
        "cachewatch.service": "payments-agents",
        "cachewatch.cache_ttl_s": 3600,
    }
    record = agents.to_record(item(attrs, resource=resource), agents.CLAUDE_CODE_REQUEST)
    assert (record["service"], record["session_id"], record["tenant"]) == (
        "payments-agents",
        "sess-1",
        "alice@example.com",
    )
    assert record["cache_ttl_s"] == 3600 and record["deploy"] == "2.1.130"
    anonymous = {k: v for k, v in REQUEST.items() if not k.startswith("user.")}
    assert agents.to_record(item(anonymous), agents.CLAUDE_CODE_REQUEST)["tenant"] == "org-1"


def test_gemini_cli_and_codex_token_counts() -> None:
    gemini = {
        "event.name": "gemini_cli.api_response",
        "session.id": "g-1",
        "model": "gemini-2.5-pro",
        "input_token_count": 5000,
        "cached_content_token_count": 4096,
        "output_token_count": 80,
        "duration_ms": 900,
    }
    record = agents.to_record(item(gemini, ""), agents.GEMINI_CLI_RESPONSE)
    assert (record["prompt_tokens"], record["cached_tokens"], record["provider"]) == (
        5000,
        4096,
        "google",
    )
    codex = {
        "event.name": "codex.sse_event",
        "event.kind": "response.completed",
        "conversation.id": "c-1",
        "model": "gpt-5-codex",
        "input_token_count": "7000",
        "cached_token_count": "6144",
        "output_token_count": "12",
    }
    record = agents.to_record(item(codex, ""), agents.CODEX_SSE_EVENT)
    assert (record["prompt_tokens"], record["cached_tokens"], record["session_id"]) == (
        7000,
        6144,
        "c-1",
    )
    assert record["provider"] == "openai"


def test_a_whole_body_gives_its_fingerprint() -> None:
    fields = agents.body_fields(body_item(orjson.dumps(BODY).decode(), 6))
    assert fields == dict(fingerprint(BODY))


def test_a_cut_body_gives_the_segments_of_its_whole_static_start() -> None:
    """Cut at 60 KB (`body_truncated`): the key being read when the cut came is left
    out; `tools` and `system` whole give their segments, and no blocks."""
    text = orjson.dumps(BODY).decode()
    whole = fingerprint(BODY)["segments"]
    static = [s for s in whole if not s["name"].startswith("message")]
    cut_in_messages = text[: text.index("fix the failing") + 3]
    fields = agents.body_fields(body_item(cut_in_messages, 6, body_truncated="true"))
    assert fields == {"segments": static}
    # Cut inside `tools`, or before it: nothing claimed.
    cut_in_tools = text[: text.index('"Read"') + 2]
    assert agents.body_fields(body_item(cut_in_tools, 6, body_truncated="true")) is None
    # Cut without saying so: the same as said.
    assert agents.body_fields(body_item(cut_in_messages, 6)) == {"segments": static}
    # File mode: only a path on the user's machine.
    file_mode = body_item("x", 6, body_ref="/home/alice/bodies/1.request.json")
    file_mode.attributes.pop("body")
    assert agents.body_fields(file_mode) is None


def test_a_body_goes_to_the_next_request_of_its_thread_once() -> None:
    bodies = agents.RequestBodies(max_keys=2)
    first, retried = {"segments": [1]}, {"segments": [2]}
    bodies.offer(body_item("{}", 5), first)
    bodies.offer(body_item("{}", 6), retried)  # a retry's attempt: the last one wins
    other_thread = item(REQUEST | {"query_source": "Explore"})
    assert bodies.take(other_thread) is None
    assert bodies.take(item(REQUEST | {"event.sequence": 4})) is None  # logged before it
    assert bodies.take(item(REQUEST)) == retried
    assert bodies.take(item(REQUEST)) is None  # given once
    for session in ("a", "b", "c"):  # bounded: the least recently seen go first
        bodies.offer(body_item("{}", 1, **{"session.id": session}), {"segments": [session]})
    assert bodies.take(item(REQUEST | {"session.id": "a"})) is None
    assert bodies.take(item(REQUEST | {"session.id": "c"})) == {"segments": ["c"]}


def test_the_inference_weighs_pauses_against_the_models_ttl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A models file giving the model a one-hour TTL: a call 15 minutes after the
    previous one that read nothing is a changed start (new blocks), not expiry, as
    the analytics will judge it; with Anthropic's five minutes it is expiry."""
    models = tmp_path / "models.toml"
    models.write_text('[[model]]\nmatch = "claude-*"\nprovider = "anthropic"\nttl_s = 3600\n')
    first = REQUEST | {"cache_read_tokens": 0, "cache_creation_tokens": 9800}
    later = first | {"event.sequence": 8}
    for profiles, kept in ((load_profiles(models), False), (None, True)):
        monkeypatch.setattr(agents, "USAGE_BLOCKS", UsageBlocks())
        before = agents.to_record(item(first), agents.CLAUDE_CODE_REQUEST, None, profiles)
        after = agents.to_record(
            item(later, start_ns=END_NS + 900 * 10**9), agents.CLAUDE_CODE_REQUEST, None, profiles
        )
        assert (before["block_hashes"] == after["block_hashes"]) is kept
