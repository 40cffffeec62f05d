"""LiteLLM's StandardLoggingPayload -> usage record (service.ingest.litellm)."""

import copy
from typing import Any

import orjson
import pytest

from service.ingest.body import BodyItem, split_records
from service.ingest.litellm import convert_item, is_litellm_payload, to_record
from service.ingest.records import UsageRecordIn

START = 1_714_564_800.25


def payload(**changes: Any) -> dict[str, Any]:
    """A trimmed StandardLoggingPayload as LiteLLM 1.x builds it (keys as sent)."""
    usage = {
        "completion_tokens": 10,
        "prompt_tokens": 2000,
        "total_tokens": 2010,
        "completion_tokens_details": None,
        "prompt_tokens_details": {"audio_tokens": None, "cached_tokens": 1536},
    }
    value: dict[str, Any] = {
        "id": "chatcmpl-abc",
        "litellm_call_id": "9c38f4ea-6a55-46ee-8a1e-47792489b162",
        "trace_id": "f42cdf68-7ad0-445f-9f97-adf243b9baf8",
        "session_id": "",
        "call_type": "acompletion",
        "cache_hit": None,
        "stream": None,
        "status": "success",
        "custom_llm_provider": "openai",
        "startTime": START,
        "endTime": START + 0.9,
        "completionStartTime": START + 0.2,
        "response_time": 0.9,
        "model": "gpt-4o-mini",
        "metadata": {
            "user_api_key_alias": None,
            "user_api_key_team_alias": None,
            "spend_logs_metadata": None,
            "requester_metadata": None,
            "usage_object": copy.deepcopy(usage),
        },
        "cache_key": None,
        "total_tokens": 2010,
        "prompt_tokens": 2000,
        "completion_tokens": 10,
        "end_user": None,
        "api_base": "",
        "model_group": "",
        "model_id": "",
        "messages": [{"role": "user", "content": "hello"}],
        "response": {"id": "chatcmpl-abc", "model": "gpt-4o-mini", "usage": copy.deepcopy(usage)},
        "model_parameters": {},
        "hidden_params": {
            "model_id": None,
            "api_base": "https://api.openai.com",
            "usage_object": None,
        },
    }
    value.update(changes)
    return value


def validated(record: dict[str, Any]) -> UsageRecordIn:
    return UsageRecordIn.model_validate(record)


def test_detection() -> None:
    assert is_litellm_payload(payload())
    assert not is_litellm_payload({"request_id": "r", "ts": 1, "call_type": "x", "startTime": 1})
    assert not is_litellm_payload({"call_type": "x"})
    assert not is_litellm_payload([payload()])
    assert not is_litellm_payload("call_type startTime")


def test_openai_payload() -> None:
    record = validated(to_record(payload()))
    assert record.request_id == "chatcmpl-abc"
    assert record.ts == int(START * 1_000_000)
    assert (record.service, record.model) == ("litellm", "gpt-4o-mini")
    assert (record.prompt_tokens, record.cached_tokens, record.completion_tokens) == (
        2000,
        1536,
        10,
    )
    assert record.ttft_ms == pytest.approx(200)
    assert record.latency_ms == pytest.approx(900)
    assert record.replica == "api.openai.com"
    assert record.deploy is None and record.session_id is None and record.tenant is None


def test_anthropic_usage_as_litellm_normalizes_it() -> None:
    """LiteLLM's usage for Anthropic: prompt_tokens already includes cache reads and
    writes; cached tokens in prompt_tokens_details, or cache_read_input_tokens."""
    usage = {
        "prompt_tokens": 3212,
        "completion_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": None},
        "cache_read_input_tokens": 3000,
        "cache_creation_input_tokens": 200,
    }
    record = validated(to_record(payload(response={"usage": usage}, metadata={})))
    assert (record.prompt_tokens, record.cached_tokens) == (3212, 3000)
    assert (record.cache_write_tokens, record.cache_ttl_s) == (200, None)


def litellm_usage(**fields: Any) -> dict[str, Any]:
    """LiteLLM's own `Usage`, as its StandardLoggingPayload carries it."""
    from litellm.types.utils import Usage  # here: importing litellm takes seconds

    dumped: dict[str, Any] = orjson.loads(orjson.dumps(Usage(**fields).model_dump()))
    return dumped


def test_cache_writes_and_the_one_hour_ttl_from_litellms_usage() -> None:
    """LiteLLM's Usage built the way its Anthropic transformation builds it:
    the writes in prompt_tokens_details.cache_write_tokens and Anthropic's own
    cache_creation_input_tokens, the one-hour part in cache_creation."""
    usage = litellm_usage(
        prompt_tokens=3212,
        completion_tokens=5,
        total_tokens=3217,
        cache_read_input_tokens=3000,
        cache_creation_input_tokens=200,
        cache_creation={"ephemeral_1h_input_tokens": 200, "ephemeral_5m_input_tokens": 0},
    )
    assert usage["prompt_tokens_details"]["cache_write_tokens"] == 200
    anthropic = payload(
        custom_llm_provider="anthropic",
        model="claude-sonnet-4-5",
        response={"usage": usage},
        metadata={},
        hidden_params={"api_base": None},
    )
    record = validated(to_record(anthropic))
    assert (record.prompt_tokens, record.cached_tokens, record.cache_write_tokens) == (
        3212,
        3000,
        200,
    )
    assert (record.cache_ttl_s, record.provider) == (3600, "anthropic")
    assert record.cache_write_1h_tokens == usage["cache_creation"]["ephemeral_1h_input_tokens"]
    five_minutes = {**usage, "cache_creation": {"ephemeral_5m_input_tokens": 200}}
    record = validated(to_record(payload(response={"usage": five_minutes}, metadata={})))
    assert (record.cache_write_tokens, record.cache_ttl_s) == (200, None)
    split = {"cache_creation_token_details": {"ephemeral_1h_input_tokens": 20}}
    details = {**usage["prompt_tokens_details"], **split}
    only_details = {"prompt_tokens": 3212, "prompt_tokens_details": details}
    record = validated(to_record(payload(response={"usage": only_details}, metadata={})))
    assert (record.cache_write_tokens, record.cache_ttl_s) == (200, 3600)
    assert record.cache_write_1h_tokens == 20


def test_prompt_cache_retention_asks_for_a_day() -> None:
    asked = payload(model_parameters={"prompt_cache_retention": "24h"})
    assert validated(to_record(asked)).cache_ttl_s == 86_400
    in_memory = payload(model_parameters={"prompt_cache_retention": "in_memory"})
    assert validated(to_record(in_memory)).cache_ttl_s is None


def test_prompt_cache_options_ttl_asks_for_thirty_minutes() -> None:
    """GPT-5.6's `prompt_cache_options` supersedes `prompt_cache_retention`; a value
    OpenAI would refuse asks for nothing (LiteLLM reports a call that was made)."""
    options = {"prompt_cache_options": {"mode": "implicit", "ttl": "30m"}}
    asked = payload(model_parameters={**options, "prompt_cache_retention": "24h"})
    assert validated(to_record(asked)).cache_ttl_s == 1800
    odd = payload(model_parameters={"prompt_cache_options": {"ttl": "forever"}})
    assert validated(to_record(odd)).cache_ttl_s is None


@pytest.mark.parametrize(
    ("changes", "provider"),
    [
        ({}, "openai"),  # hidden_params.api_base is https://api.openai.com
        ({"api_base": "https://api.openai.com/v1"}, "openai"),
        ({"api_base": None, "hidden_params": None}, "openai"),
        ({"api_base": "http://10.0.0.7:8000/v1"}, None),  # an OpenAI-compatible engine
        ({"custom_llm_provider": "text-completion-openai", "api_base": "http://e:1"}, None),
        ({"custom_llm_provider": "hosted_vllm", "api_base": "http://10.0.0.7:8000"}, "vllm"),
        ({"custom_llm_provider": "anthropic"}, "anthropic"),
        ({"custom_llm_provider": "bedrock"}, "bedrock"),
        ({"custom_llm_provider": "vertex_ai"}, "google"),
        ({"custom_llm_provider": "gemini"}, "google"),
        ({"custom_llm_provider": "deepseek"}, "deepseek"),
        ({"custom_llm_provider": "azure"}, "azure"),  # as it is
        ({"custom_llm_provider": None}, None),
        ({"custom_llm_provider": ""}, None),
    ],
)
def test_provider_from_custom_llm_provider(changes: dict[str, Any], provider: str | None) -> None:
    assert validated(to_record(payload(**changes))).provider == provider


def test_scenario_and_provider_from_the_callers_metadata() -> None:
    caller = {
        "cachewatch_scenario": "ticket-summary",
        "cachewatch_provider": "azure-openai",
        "cachewatch_cache_ttl_s": 600,
        "cachewatch_cache_write_tokens": 99,  # measured by LiteLLM: not the caller's
    }
    metadata = {**payload()["metadata"], "requester_metadata": caller}
    record = validated(to_record(payload(metadata=metadata)))
    assert (record.scenario, record.provider, record.cache_ttl_s) == (
        "ticket-summary",
        "azure-openai",
        600,
    )
    assert record.cache_write_tokens == 0


def test_bad_cache_writes_are_left_for_validation_to_reject() -> None:
    usage = {
        "prompt_tokens": 10,
        "prompt_tokens_details": {"cached_tokens": 5, "cache_write_tokens": 6},
    }
    with pytest.raises(ValueError, match="cache_write_tokens must not exceed"):
        validated(to_record(payload(response={"usage": usage}, metadata={})))
    bad = {"prompt_tokens": 10, "cache_creation_input_tokens": "6"}
    with pytest.raises(ValueError, match="cache_write_tokens"):
        validated(to_record(payload(response={"usage": bad}, metadata={})))


def test_usage_from_metadata_or_hidden_params_or_totals() -> None:
    base = payload()
    in_metadata = validated(to_record(payload(response="text")))
    assert in_metadata.cached_tokens == 1536
    hidden = {
        **base["hidden_params"],
        "usage_object": {"prompt_tokens": 50, "completion_tokens": 1},
    }
    only_hidden = validated(to_record(payload(response=None, metadata={}, hidden_params=hidden)))
    assert (only_hidden.prompt_tokens, only_hidden.cached_tokens) == (50, 0)
    totals = validated(to_record(payload(response=None, metadata={}, hidden_params={})))
    assert (totals.prompt_tokens, totals.cached_tokens, totals.completion_tokens) == (2000, 0, 10)


def test_replica_prefers_the_engine_endpoint() -> None:
    router = payload(api_base="http://10.0.0.7:8000/v1", model_id="dep-1")
    assert to_record(router)["replica"] == "10.0.0.7:8000"
    no_base = payload(api_base="", model_id="dep-1", hidden_params={"api_base": None})
    assert to_record(no_base)["replica"] == "dep-1"
    nothing = payload(api_base=None, model_id=None, hidden_params=None)
    assert "replica" not in to_record(nothing)


def test_service_deploy_and_fingerprint_from_metadata() -> None:
    proxy_team = payload(
        metadata={**payload()["metadata"], "user_api_key_team_alias": "search-team"},
        end_user="customer-9",
        session_id="sess-1",
        model_parameters={"prompt_cache_key": "k-1", "temperature": 0},
    )
    record = validated(to_record(proxy_team))
    assert (record.service, record.tenant, record.session_id) == (
        "search-team",
        "customer-9",
        "sess-1",
    )
    assert record.cache_key == "k-1"

    requester = {
        "cachewatch_service": "assistant",
        "cachewatch_deploy": "v3.5.1",
        "cachewatch": {
            "block_size": 128,
            "block_hashes": ["a", "b"],
            "prefix_hash": "p",
            "prefix_tokens": 900,
            "segments": [{"name": "system", "hash": "s", "tokens": 900}],
        },
    }
    metadata = {
        **payload()["metadata"],
        "user_api_key_team_alias": "team",
        "requester_metadata": requester,
    }
    record = validated(to_record(payload(metadata=metadata)))
    assert (record.service, record.deploy) == ("assistant", "v3.5.1")
    assert (record.block_size, record.block_hashes) == (128, ["a", "b"])
    assert (record.prefix_hash, record.prefix_tokens) == ("p", 900)
    assert record.segments is not None and record.segments[0].name == "system"

    spend = {**payload()["metadata"], "spend_logs_metadata": {"cachewatch_service": "billing"}}
    assert to_record(payload(metadata=spend))["service"] == "billing"


def test_bad_values_are_left_for_validation_to_reject() -> None:
    broken = payload(
        model=None, startTime="yesterday", response={"usage": {"prompt_tokens": "2000"}}
    )
    record = to_record(broken)
    assert "model" not in record and "ttft_ms" not in record
    with pytest.raises(ValueError) as error:
        validated(record)
    message = str(error.value)
    assert "model" in message and "ts" in message and "prompt_tokens" in message


def test_failures_and_response_cache_hits_are_rejected_with_a_reason() -> None:
    failed = BodyItem(0, payload(status="failure", response=None, error_str="timeout"))
    assert "failure" in (convert_item(failed) or "")
    assert orjson.loads(failed.verbatim())["status"] == "failure"  # kept as sent
    hit = BodyItem(0, payload(cache_hit=True))
    assert "response-cache" in (convert_item(hit) or "")


def test_convert_item_keeps_the_payload_as_sent() -> None:
    [item] = split_records(orjson.dumps([payload()]))
    assert convert_item(item) is None
    assert item.value["request_id"] == "chatcmpl-abc"
    assert orjson.loads(item.verbatim())["call_type"] == "acompletion"
    line = orjson.dumps(payload())
    [ndjson_item] = split_records(line + b"\n" + line)[:1]
    assert convert_item(ndjson_item) is None
    assert ndjson_item.verbatim() == line
