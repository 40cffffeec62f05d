"""A call's usage record (cachewatch_client.calls.to_record): each field and where
it comes from, and that cachewatch's own model of a record accepts it."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from cachewatch_client import Labels
from cachewatch_client.calls import Call, to_record
from cachewatch_client.fingerprint import fingerprint
from cachewatch_client.replies import Reply
from service.ingest.records import UsageRecordIn
from tests.conftest import is_postgres_run

pytestmark = pytest.mark.skipif(is_postgres_run(), reason="touches no database: run once")

STARTED = 1_750_000_000.123456789
CHAT_USAGE: dict[str, Any] = {
    "prompt_tokens": 1200,
    "completion_tokens": 40,
    "prompt_tokens_details": {"cached_tokens": 1024},
}
REQUEST: dict[str, Any] = {
    "model": "gpt-x",
    "messages": [
        {"role": "system", "content": "You answer questions about invoices. " * 30},
        {"role": "user", "content": "Where is my invoice?"},
    ],
}


def make(
    request: bytes | dict[str, Any] | None = None,
    reply: Reply | None = None,
    **fields: Any,
) -> Call:
    values: dict[str, Any] = {
        "request": REQUEST if request is None else request,
        "reply": Reply("chatcmpl-1", "gpt-x-2025", CHAT_USAGE) if reply is None else reply,
        "started": STARTED,
        "labels": Labels(),
        "service": "support-bot",
        "block_size": 16,
        **fields,
    }
    return Call(**values)


def record_of(call: Call) -> dict[str, Any]:
    record = to_record(call)
    assert record is not None
    return record


# --- identity, time, model ------------------------------------------------------------


def test_request_id_precedence() -> None:
    assert record_of(make(request_id="mine"))["request_id"] == "mine"
    assert record_of(make())["request_id"] == "chatcmpl-1"
    anonymous = make(reply=Reply(None, None, CHAT_USAGE))
    first, second = record_of(anonymous)["request_id"], record_of(anonymous)["request_id"]
    assert re.fullmatch(r"[0-9a-f]{32}", first) and first != second


def test_ts_and_timings() -> None:
    record = record_of(make(first_token=STARTED + 0.2505, finished=STARTED + 1.5))
    assert record["ts"] == round(STARTED, 6)
    assert record["ttft_ms"] == pytest.approx(250.5, abs=1e-3)
    assert record["latency_ms"] == pytest.approx(1500.0, abs=1e-3)
    bare = record_of(make())
    assert "ttft_ms" not in bare and "latency_ms" not in bare
    # A clock that went backwards gives 0, never a negative time.
    assert record_of(make(first_token=STARTED - 1))["ttft_ms"] == 0.0


def test_model_from_the_request_else_the_reply() -> None:
    assert record_of(make())["model"] == "gpt-x"
    without = {k: v for k, v in REQUEST.items() if k != "model"}
    assert record_of(make(request=without))["model"] == "gpt-x-2025"
    with pytest.raises(ValueError, match="model"):
        to_record(make(request=without, reply=Reply("id", None, CHAT_USAGE)))
    with pytest.raises(ValueError, match="model"):
        to_record(make(request={**REQUEST, "model": 5}))


def test_service_usage_and_replica() -> None:
    record = record_of(make(replica="pod-7"))
    assert record["service"] == "support-bot"
    assert record["usage"] == CHAT_USAGE
    assert record["replica"] == "pod-7"
    assert "replica" not in record_of(make())


def test_no_usage_gives_no_record() -> None:
    assert to_record(make(reply=Reply("chatcmpl-1", "gpt-x", None))) is None


@pytest.mark.parametrize("body", [b"[1, 2]", b'"text"', b"null", b"3"])
def test_a_request_that_is_not_an_object(body: bytes) -> None:
    with pytest.raises(ValueError, match="not a JSON object"):
        to_record(make(request=body))


def test_a_request_that_is_not_json() -> None:
    with pytest.raises(ValueError):
        to_record(make(request=b"{nope"))


# --- labels ----------------------------------------------------------------------------


def test_session_id_precedence() -> None:
    keyed = {**REQUEST, "prompt_cache_key": "conv-from-key"}
    record = record_of(make(request=keyed, labels=Labels(session_id="conv-label")))
    assert record["session_id"] == "conv-label"
    assert record["cache_key"] == "conv-from-key"  # the key is still the key
    record = record_of(make(request=keyed))
    assert record["session_id"] == record["cache_key"] == "conv-from-key"
    plain = record_of(make())
    assert "session_id" not in plain and "cache_key" not in plain
    assert "cache_key" not in record_of(make(request={**REQUEST, "prompt_cache_key": 7}))


@pytest.mark.parametrize(
    ("extra", "label", "tenant"),
    [
        ({"metadata": {"user_id": "ant-user"}, "user": "oai-user"}, "acme", "acme"),
        ({"metadata": {"user_id": "ant-user"}, "user": "oai-user"}, None, "ant-user"),
        ({"safety_identifier": "safe", "user": "oai-user"}, None, "safe"),
        ({"user": "oai-user"}, None, "oai-user"),
        ({"metadata": {"user_id": ""}, "user": "oai-user"}, None, "oai-user"),
        ({"metadata": "not a mapping", "safety_identifier": "safe"}, None, "safe"),
        ({"user": 42}, None, None),
        ({}, None, None),
    ],
)
def test_tenant_precedence(extra: dict[str, Any], label: str | None, tenant: str | None) -> None:
    record = record_of(make(request={**REQUEST, **extra}, labels=Labels(tenant=label)))
    assert record.get("tenant") == tenant


@pytest.mark.parametrize(
    ("retention", "ttl"), [("24h", 86_400), ("in_memory", None), (None, None), (24, None)]
)
def test_cache_ttl_from_openai_retention(retention: Any, ttl: int | None) -> None:
    request = (
        dict(REQUEST) if retention is None else {**REQUEST, "prompt_cache_retention": retention}
    )
    assert record_of(make(request=request)).get("cache_ttl_s") == ttl


def test_scenario_deploy_and_attributes() -> None:
    labels = Labels(
        scenario="triage", deploy="v42", attributes={"region": "eu", "tier": 1, "beta": True}
    )
    record = record_of(make(labels=labels, attributes={"tier": 2, "route": "fast"}))
    assert record["scenario"] == "triage" and record["deploy"] == "v42"
    assert record["attributes"] == {"region": "eu", "tier": 2, "beta": True, "route": "fast"}
    bare = record_of(make())
    for name in ("scenario", "deploy", "attributes", "tenant"):
        assert name not in bare


# --- fingerprint ----------------------------------------------------------------------


@pytest.mark.parametrize("block_size", [16, 64])
def test_fingerprint_fields(block_size: int) -> None:
    expected = fingerprint(REQUEST, block_size=block_size)
    assert set(expected) >= {"segments", "prefix_hash", "prefix_tokens", "block_size"}
    for request in (REQUEST, json.dumps(REQUEST).encode()):
        record = record_of(make(request=request, block_size=block_size))
        assert {k: record[k] for k in expected} == expected
    assert record["block_size"] == block_size


def test_prompt_ids_are_passed_through() -> None:
    ids = list(range(100))
    record = record_of(make(prompt_ids=ids))
    expected = fingerprint(REQUEST, block_size=16, prompt_ids=ids)
    assert {k: record[k] for k in expected} == expected
    assert record["block_hashes"] != record_of(make())["block_hashes"]


# --- the answer, raw ------------------------------------------------------------------


def test_reply_from_a_raw_body() -> None:
    body = json.dumps({"id": "chatcmpl-9", "model": "gpt-x", "usage": CHAT_USAGE}).encode()
    record = record_of(raw(body=body))
    assert record["request_id"] == "chatcmpl-9" and record["usage"] == CHAT_USAGE
    assert to_record(raw(body=None)) is None  # no body at all: no usage


def test_reply_from_stream_events() -> None:
    start = {
        "type": "message_start",
        "message": {"id": "msg_1", "model": "claude-x", "usage": {"input_tokens": 7}},
    }
    delta = {"type": "message_delta", "usage": {"output_tokens": 3}}
    events = [json.dumps(e).encode() for e in (start, delta)]
    record = record_of(raw(events=events, api="messages"))
    assert record["request_id"] == "msg_1"
    assert record["usage"] == {"input_tokens": 7, "output_tokens": 3}


def raw(**fields: Any) -> Call:
    """An instrumented call: its answer's bytes, not yet read."""
    return Call(
        request=json.dumps(REQUEST).encode(),
        started=STARTED,
        labels=Labels(),
        service="support-bot",
        block_size=16,
        **fields,
    )


# --- cachewatch's model of a record ---------------------------------------------------

ANTHROPIC_USAGE: dict[str, Any] = {
    "input_tokens": 10,
    "cache_read_input_tokens": 200,
    "cache_creation_input_tokens": 30,
    "output_tokens": 7,
}
RESPONSES_USAGE: dict[str, Any] = {
    "input_tokens": 50,
    "input_tokens_details": {"cached_tokens": 32},
    "output_tokens": 3,
}


@pytest.mark.parametrize(
    ("reply", "tokens"),
    [
        (Reply("chatcmpl-1", None, CHAT_USAGE), (1200, 1024, 0, 40)),
        (Reply("msg_1", None, ANTHROPIC_USAGE), (240, 200, 30, 7)),
        (Reply("resp_1", None, RESPONSES_USAGE), (50, 32, 0, 3)),
        (
            Reply(
                "g1",
                None,
                {"promptTokenCount": 100, "cachedContentTokenCount": 40},
                "usageMetadata",
            ),
            (100, 40, 0, None),
        ),
        (
            Reply(
                "g2",
                None,
                {"prompt_token_count": 90, "candidates_token_count": 5},
                "usage_metadata",
            ),
            (90, 0, 0, 5),
        ),
    ],
)
def test_the_record_is_valid_for_cachewatch(
    reply: Reply, tokens: tuple[int, int, int, int | None]
) -> None:
    labels = Labels("conv-1", "acme", "triage", "v42", {"region": "eu"})
    request = {**REQUEST, "prompt_cache_key": "k", "prompt_cache_retention": "24h"}
    record = record_of(
        make(
            request=request,
            reply=reply,
            labels=labels,
            first_token=STARTED + 0.3,
            finished=STARTED + 2,
            replica="pod-1",
        )
    )
    parsed = UsageRecordIn.model_validate(record)
    got = (parsed.prompt_tokens, parsed.cached_tokens, parsed.cache_write_tokens)
    assert (*got, parsed.completion_tokens) == tokens
    assert parsed.request_id == reply.response_id
    assert parsed.ts == round(STARTED * 1_000_000)
    assert (parsed.service, parsed.model, parsed.replica) == ("support-bot", "gpt-x", "pod-1")
    assert (parsed.session_id, parsed.tenant, parsed.scenario, parsed.deploy) == (
        "conv-1",
        "acme",
        "triage",
        "v42",
    )
    assert parsed.cache_key == "k" and parsed.cache_ttl_s == 86_400
    assert parsed.ttft_ms == pytest.approx(300.0) and parsed.latency_ms == pytest.approx(2000.0)
    assert parsed.block_size == 16 and parsed.block_hashes == record["block_hashes"]
    assert parsed.prefix_hash == record["prefix_hash"]
    assert [s.hash for s in parsed.segments or []] == [s["hash"] for s in record["segments"]]
    assert parsed.attributes == {"region": "eu"}
    # It survives the wire: the JSON the shipper posts parses to the same record.
    assert UsageRecordIn.model_validate(json.loads(json.dumps(record))) == parsed
