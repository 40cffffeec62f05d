"""The providers' usage objects (service.ingest.shapes, contract section 1) built
from the providers' own SDK types and serialized as those SDKs do: every shape
gives its fields, and the validated path (pydantic), the fast path's line and
dict decoders and the bulk path build the identical row for it.

OpenAI and Anthropic: their Python SDKs' pydantic models. Gemini: google-genai's
`GenerateContentResponseUsageMetadata`, dumped by alias (the REST API's camelCase)
and by field name (snake_case). Bedrock: a Converse response body parsed by
botocore's own parser against the `bedrock-runtime` service model (what boto3's
`converse()` returns), its `usage` checked against the `TokenUsage` shape.
DeepSeek has no SDK: its usage object is a literal from its API documentation."""

import json
from typing import Any

import botocore.parsers
import botocore.session
import botocore.validate
import orjson
import pytest
from anthropic.types import Usage as AnthropicUsage
from google.genai import types as genai_types
from openai.types.completion_usage import CompletionUsage
from openai.types.responses import ResponseUsage
from pydantic import ValidationError

from service.ingest import bulk, fast
from service.ingest.records import (
    UsageRecordIn,
    format_validation_error,
    received_context,
    to_row,
)
from service.usage_row import USAGE_COLUMNS, usage_row_values

RECEIVED_US = 1_764_410_400_000_000
BASE: dict[str, Any] = {"request_id": "r-1", "ts": 1_764_400_000, "service": "svc", "model": "m"}
# (prompt_tokens, cached_tokens, cache_write_tokens, completion_tokens, cache_ttl_s, provider)
Expected = tuple[int, int, int, int | None, int | None, str | None]
DERIVED = (
    "prompt_tokens",
    "cached_tokens",
    "cache_write_tokens",
    "completion_tokens",
    "cache_ttl_s",
    "provider",
)


def rows(record: dict[str, Any]) -> dict[str, tuple[Any, ...] | str | None]:
    """The stored tuple by each path: pydantic's (or its error), the fast path's
    line and dict decoders and the bulk path's (None: declined)."""
    value = orjson.loads(orjson.dumps(record))  # as a shipper sends it
    try:
        validated = UsageRecordIn.model_validate(value, context=received_context(RECEIVED_US))
        expected: tuple[Any, ...] | str = usage_row_values(to_row(validated, RECEIVED_US))
    except ValidationError as exc:
        expected = format_validation_error(exc)
    line = orjson.dumps(record)
    from_line = fast.decode_line(line)
    from_value = fast.convert_value(value)
    in_bulk = bulk.bulk_rows(line + b"\n" + line, RECEIVED_US)
    try:
        bulk_row = None if in_bulk is None else next(in_bulk)
    except bulk.NotBulk:
        bulk_row = None
    return {
        "validated": expected,
        "line": None if from_line is None else fast.record_values(from_line, RECEIVED_US),
        "value": None if from_value is None else fast.record_values(from_value, RECEIVED_US),
        "bulk": bulk_row,
    }


def stored_row(record: dict[str, Any]) -> dict[str, Any]:
    """The row as stored, after checking that every path stored it identically (by
    repr: 1 and 1.0 differ)."""
    by_path = rows(record)
    validated = by_path["validated"]
    assert isinstance(validated, tuple), validated
    for path in ("line", "value", "bulk"):
        assert repr(by_path[path]) == repr(validated), path
    return dict(zip(USAGE_COLUMNS, validated, strict=True))


def stored(record: dict[str, Any]) -> Expected:
    """The derived fields as stored (`stored_row`)."""
    row = stored_row(record)
    return tuple(row[name] for name in DERIVED)  # type: ignore[return-value]


def refused(record: dict[str, Any]) -> str:
    """pydantic's reason, after checking that the fast path declines the record."""
    by_path = rows(record)
    assert (by_path["line"], by_path["value"], by_path["bulk"]) == (None, None, None)
    reason = by_path["validated"]
    assert isinstance(reason, str), reason
    return reason


# --- OpenAI ---------------------------------------------------------------------


def openai_chat(cached: int | None, written: int | None = None) -> CompletionUsage:
    details: dict[str, Any] | None = None
    if cached is not None or written is not None:
        details = {"cached_tokens": cached, "cache_write_tokens": written, "audio_tokens": 0}
    return CompletionUsage.model_validate(
        {
            "prompt_tokens": 2006,
            "completion_tokens": 300,
            "total_tokens": 2306,
            "prompt_tokens_details": details,
        }
    )


@pytest.mark.parametrize(
    ("cached", "written", "expected"),
    [
        (1920, None, (2006, 1920, 0, 300, None, "openai")),
        (1024, 512, (2006, 1024, 512, 300, None, "openai")),
        (None, None, (2006, 0, 0, 300, None, "openai")),
    ],
)
def test_openai_chat_completions(cached: int | None, written: int | None, expected: Any) -> None:
    usage = openai_chat(cached, written)
    for dumped in (usage.model_dump(), orjson.loads(usage.model_dump_json())):
        assert stored({**BASE, "usage": dumped}) == expected


def test_openai_request_options_give_the_cache_lifetime() -> None:
    """A record may carry OpenAI's request parameters as sent (the `openai` SDK's
    `PromptCacheOptions` and `prompt_cache_retention` values): GPT-5.6's
    `prompt_cache_options.ttl` "30m" is 1,800 s and supersedes `prompt_cache_retention`;
    "24h" is a day; "in_memory" the model's default; the record's own wins."""
    from openai.types.chat.completion_create_params import PromptCacheOptions

    usage = openai_chat(1024, 512).model_dump()
    options: PromptCacheOptions = {"mode": "explicit", "ttl": "30m"}
    base = {**BASE, "model": "gpt-5.6", "usage": usage}
    assert stored({**base, "prompt_cache_options": options}) == (
        2006,
        1024,
        512,
        300,
        1800,
        "openai",
    )
    assert stored({**base, "prompt_cache_retention": "24h"})[4] == 86_400
    assert stored({**base, "prompt_cache_retention": "in_memory"})[4] is None
    both = {**base, "prompt_cache_retention": "24h", "prompt_cache_options": options}
    assert stored(both)[4] == 1800
    assert stored({**both, "cache_ttl_s": 600.0})[4] == 600.0
    assert stored({**base, "prompt_cache_options": {"mode": "implicit"}})[4] is None
    assert stored({**base, "prompt_cache_options": None, "prompt_cache_retention": None})[4] is None


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        (
            {"prompt_cache_options": {"ttl": "forever"}},
            'prompt_cache_options.ttl must be like "30m"',
        ),
        ({"prompt_cache_options": "30m"}, "prompt_cache_options must be an object or null"),
        ({"prompt_cache_retention": "1h"}, 'prompt_cache_retention must be "24h" or "in_memory"'),
        ({"prompt_cache_retention": 24}, 'prompt_cache_retention must be "24h" or "in_memory"'),
    ],
)
def test_openai_request_options_openai_would_refuse_are_refused(
    options: dict[str, Any], reason: str
) -> None:
    assert reason in refused({**BASE, "prompt_tokens": 10, **options})


def test_openai_shapes_name_openai_only_without_a_replica() -> None:
    """vLLM and SGLang answer in OpenAI's shapes too, and they name a replica."""
    usage = openai_chat(1920).model_dump()
    assert stored({**BASE, "usage": usage, "replica": "vllm-0"})[5] is None
    assert stored({**BASE, "usage": usage, "replica": None})[5] == "openai"
    assert stored({**BASE, "usage": usage, "replica": "vllm-0", "provider": "vllm"})[5] == "vllm"


def test_openai_responses() -> None:
    usage = ResponseUsage.model_validate(
        {
            "input_tokens": 5000,
            "input_tokens_details": {"cached_tokens": 4096, "cache_write_tokens": 700},
            "output_tokens": 120,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 5120,
        }
    )
    for dumped in (usage.model_dump(), orjson.loads(usage.model_dump_json(exclude_none=True))):
        assert stored({**BASE, "usage": dumped}) == (5000, 4096, 700, 120, None, "openai")


# --- Anthropic ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (
            {"input_tokens": 12, "output_tokens": 40, "cache_read_input_tokens": 3000},
            (3012, 3000, 0, 40, None, "anthropic"),
        ),
        (
            {
                "input_tokens": 12,
                "output_tokens": 40,
                "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 2500,
                "cache_creation": {
                    "ephemeral_5m_input_tokens": 2500,
                    "ephemeral_1h_input_tokens": 0,
                },
            },
            (2512, 0, 2500, 40, None, "anthropic"),
        ),
        (  # written to the one-hour cache (`"ttl": "1h"`)
            {
                "input_tokens": 12,
                "output_tokens": 40,
                "cache_read_input_tokens": 1000,
                "cache_creation_input_tokens": 2500,
                "cache_creation": {
                    "ephemeral_5m_input_tokens": 500,
                    "ephemeral_1h_input_tokens": 2000,
                },
            },
            (3512, 1000, 2500, 40, 3600, "anthropic"),
        ),
    ],
)
def test_anthropic_messages(usage: dict[str, Any], expected: Expected) -> None:
    sdk = AnthropicUsage.model_validate(usage)
    for dumped in (sdk.model_dump(), orjson.loads(sdk.model_dump_json(exclude_none=True))):
        assert stored({**BASE, "usage": dumped}) == expected


def one_hour_writes(record: dict[str, Any]) -> int | None:
    """The stored `cache_write_1h_tokens`, after checking that every path stored
    the same row."""
    stored(record)
    validated = rows(record)["validated"]
    assert isinstance(validated, tuple), validated
    return dict(zip(USAGE_COLUMNS, validated, strict=True))["cache_write_1h_tokens"]  # type: ignore[no-any-return]


ANTHROPIC_BOTH_TTLS = {
    "input_tokens": 12,
    "output_tokens": 40,
    "cache_read_input_tokens": 1000,
    "cache_creation_input_tokens": 2500,
    "cache_creation": {"ephemeral_5m_input_tokens": 500, "ephemeral_1h_input_tokens": 2000},
}


def test_anthropic_writes_by_ttl() -> None:
    """Issue 34: the one-hour share of the writes, from the SDK's `cache_creation`
    (priced apart, docs/providers.md); 0 when all went to the 5-minute cache; null
    (not split) without `cache_creation`."""
    sdk = AnthropicUsage.model_validate(ANTHROPIC_BOTH_TTLS)
    for dumped in (sdk.model_dump(), orjson.loads(sdk.model_dump_json(exclude_none=True))):
        assert one_hour_writes({**BASE, "usage": dumped}) == 2000
    five_minutes = {**ANTHROPIC_BOTH_TTLS, "cache_creation": {"ephemeral_5m_input_tokens": 2500}}
    assert one_hour_writes({**BASE, "usage": five_minutes}) == 0
    unsplit = {k: v for k, v in ANTHROPIC_BOTH_TTLS.items() if k != "cache_creation"}
    assert one_hour_writes({**BASE, "usage": unsplit}) is None
    # The record's own wins; more than its writes is refused.
    assert one_hour_writes({**BASE, "usage": unsplit, "cache_write_1h_tokens": 2500}) == 2500
    too_many = {**BASE, "usage": unsplit, "cache_write_1h_tokens": 2501}
    assert "cache_write_1h_tokens must not exceed cache_write_tokens" in refused(too_many)


def test_anthropic_messages_without_cache_fields() -> None:
    """The SDK writes the cache fields as null: the Anthropic shape. Without them
    (`exclude_none`) `input_tokens` alone is all input, nothing cached, and names
    no provider: other usage objects (LangChain's, say) look the same."""
    sdk = AnthropicUsage.model_validate({"input_tokens": 12, "output_tokens": 40})
    assert stored({**BASE, "usage": sdk.model_dump()}) == (12, 0, 0, 40, None, "anthropic")
    bare = orjson.loads(sdk.model_dump_json(exclude_none=True))
    assert stored({**BASE, "usage": bare}) == (12, 0, 0, 40, None, None)


def test_fields_on_the_record_win_even_when_null() -> None:
    usage = AnthropicUsage.model_validate(
        {
            "input_tokens": 12,
            "output_tokens": 40,
            "cache_read_input_tokens": 1000,
            "cache_creation_input_tokens": 2000,
            "cache_creation": {"ephemeral_1h_input_tokens": 2000, "ephemeral_5m_input_tokens": 0},
        }
    ).model_dump()
    record = {
        **BASE,
        "usage": usage,
        "cache_write_tokens": 5,
        "cache_ttl_s": None,
        "provider": None,
    }
    assert stored(record) == (3012, 1000, 5, 40, None, None)
    record = {**BASE, "usage": usage, "cache_ttl_s": 300.0, "provider": "anthropic-eu"}
    assert stored(record) == (3012, 1000, 2000, 40, 300.0, "anthropic-eu")


# --- Google Gemini --------------------------------------------------------------


def gemini_usage(cached: int | None) -> genai_types.GenerateContentResponseUsageMetadata:
    return genai_types.GenerateContentResponseUsageMetadata(
        prompt_token_count=3000,
        cached_content_token_count=cached,
        candidates_token_count=50,
        thoughts_token_count=10,
        total_token_count=3060,
    )


@pytest.mark.parametrize(("cached", "expected_cached"), [(2048, 2048), (None, 0)])
@pytest.mark.parametrize("key", ["usageMetadata", "usage_metadata"])
@pytest.mark.parametrize("by_alias", [True, False], ids=["camelCase", "snake_case"])
def test_gemini(cached: int | None, expected_cached: int, key: str, by_alias: bool) -> None:
    """`promptTokenCount` includes the cached content; under either top-level key,
    in either spelling (the REST API's JSON, or the SDK's `model_dump()`)."""
    dumped = gemini_usage(cached).model_dump(by_alias=by_alias, exclude_none=True)
    assert ("promptTokenCount" in dumped) is by_alias
    assert stored({**BASE, key: dumped}) == (3000, expected_cached, 0, 50, None, "google")


def test_gemini_is_read_from_its_own_keys_only() -> None:
    camel = gemini_usage(2048).model_dump(by_alias=True, exclude_none=True)
    assert "prompt_tokens: Field required" in refused({**BASE, "usage": camel})
    # `usage` is looked at first: a record with both takes it.
    chat = openai_chat(5).model_dump()
    assert stored({**BASE, "usage": chat, "usageMetadata": camel})[:2] == (2006, 5)
    assert stored({**BASE, "usage": [1], "usageMetadata": camel})[:2] == (3000, 2048)


@pytest.mark.parametrize("key", ["usageMetadata", "usage_metadata"])
@pytest.mark.parametrize(
    ("newer", "older"),
    [("totalCachedTokens", "cachedContentTokenCount"),
     ("total_cached_tokens", "cached_content_token_count")],
)  # fmt: skip
def test_gemini_total_cached_tokens(key: str, newer: str, older: str) -> None:
    """The newer name of the cached count (ai.google.dev's caching page, 2026-10-13;
    not yet in google-genai 3.6.1's GenerateContentResponseUsageMetadata, so the
    documented JSON), read where the older one is absent or null."""
    by_alias = newer == "totalCachedTokens"
    dumped = gemini_usage(None).model_dump(by_alias=by_alias, exclude_none=True)
    assert stored({**BASE, key: {**dumped, newer: 2048}}) == (3000, 2048, 0, 50, None, "google")
    assert stored({**BASE, key: {**dumped, older: None, newer: 1024}})[:2] == (3000, 1024)
    # Both: the older one, the count generateContent has always sent.
    assert stored({**BASE, key: {**dumped, older: 2048, newer: 1024}})[:2] == (3000, 2048)


def interactions_usage(cached: int | None) -> dict[str, Any]:
    """The usage of an Interactions API response as google-genai's own type dumps
    it (its interactions Usage model, field names in either mode)."""
    from google.genai._gaos.types.interactions.usage import Usage

    usage = Usage(total_input_tokens=3000, total_cached_tokens=cached, total_output_tokens=50,
                  total_thought_tokens=10, total_tokens=3060)  # fmt: skip
    return usage.model_dump(exclude_none=True)


@pytest.mark.parametrize(("cached", "expected_cached"), [(2048, 2048), (None, 0)])
def test_gemini_interactions(cached: int | None, expected_cached: int) -> None:
    """`total_input_tokens` is the prompt with its cached part ("Number of tokens in
    the prompt (context)"; `total_cached_tokens`: "in the cached part of the
    prompt", google-genai's Interactions Usage)."""
    usage = interactions_usage(cached)
    assert stored({**BASE, "usage": usage}) == (3000, expected_cached, 0, 50, None, "google")
    camel = {"totalInputTokens": 3000, "totalCachedTokens": cached, "totalOutputTokens": 50}
    assert stored({**BASE, "usage": camel}) == (3000, expected_cached, 0, 50, None, "google")


# --- Amazon Bedrock Converse ----------------------------------------------------

_BEDROCK = botocore.session.get_session().get_service_model("bedrock-runtime")


def converse_usage(usage: dict[str, Any]) -> dict[str, Any]:
    """`usage` of a Converse response body as botocore parses it (boto3's
    `client.converse()` answer), checked against the TokenUsage shape."""
    body = {
        "output": {"message": {"role": "assistant", "content": [{"text": "hi"}]}},
        "stopReason": "end_turn",
        "usage": usage,
        "metrics": {"latencyMs": 812},
    }
    operation = _BEDROCK.operation_model("Converse")
    parser = botocore.parsers.create_parser(_BEDROCK.metadata["protocol"])
    response = {"body": json.dumps(body).encode(), "headers": {}, "status_code": 200}
    parsed: dict[str, Any] = parser.parse(response, operation.output_shape)["usage"]
    report = botocore.validate.ParamValidator().validate(parsed, _BEDROCK.shape_for("TokenUsage"))
    assert not report.has_errors(), report.generate_report()
    return parsed


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (
            {"inputTokens": 12, "outputTokens": 4, "totalTokens": 16},
            (12, 0, 0, 4, None, "bedrock"),
        ),
        (
            {
                "inputTokens": 12,
                "outputTokens": 4,
                "totalTokens": 3316,
                "cacheReadInputTokens": 3000,
                "cacheWriteInputTokens": 300,
                "cacheDetails": [{"ttl": "5m", "inputTokens": 300}],
            },
            (3312, 3000, 300, 4, None, "bedrock"),
        ),
        (
            {
                "inputTokens": 12,
                "outputTokens": 4,
                "totalTokens": 3316,
                "cacheReadInputTokens": 3000,
                "cacheWriteInputTokens": 300,
                "cacheDetails": [
                    {"ttl": "1h", "inputTokens": 200},
                    {"ttl": "5m", "inputTokens": 100},
                ],
            },
            (3312, 3000, 300, 4, 3600, "bedrock"),
        ),
    ],
)
def test_bedrock_converse(usage: dict[str, Any], expected: Expected) -> None:
    assert stored({**BASE, "usage": converse_usage(usage)}) == expected


def test_bedrock_writes_by_ttl() -> None:
    """The `cacheDetails` entries with `ttl` "1h" are the one-hour writes; none of
    them: 0; no `cacheDetails`: not split."""
    usage = {"inputTokens": 12, "outputTokens": 4, "totalTokens": 3316,
             "cacheReadInputTokens": 3000, "cacheWriteInputTokens": 300}  # fmt: skip
    details = [{"ttl": "1h", "inputTokens": 200}, {"ttl": "5m", "inputTokens": 100}]
    assert (
        one_hour_writes({**BASE, "usage": converse_usage({**usage, "cacheDetails": details})})
        == 200
    )
    five = [{"ttl": "5m", "inputTokens": 300}]
    assert one_hour_writes({**BASE, "usage": converse_usage({**usage, "cacheDetails": five})}) == 0
    assert one_hour_writes({**BASE, "usage": converse_usage(usage)}) is None


def test_bedrock_member_names_are_the_service_models() -> None:
    """The names read are TokenUsage's members (a rename in the model fails here)."""
    members = set(_BEDROCK.shape_for("TokenUsage").members)
    read = {"inputTokens", "outputTokens", "cacheReadInputTokens", "cacheWriteInputTokens"}
    assert read | {"cacheDetails"} <= members
    detail = _BEDROCK.shape_for("TokenUsage").members["cacheDetails"].member
    assert {"ttl", "inputTokens"} <= set(detail.members)
    assert "1h" in detail.members["ttl"].enum


# --- DeepSeek -------------------------------------------------------------------

# The `usage` of a chat completion as DeepSeek's API documentation shows it
# (api-docs.deepseek.com, "Create Chat Completion"; context caching guide).
DEEPSEEK_USAGE = {
    "completion_tokens": 11,
    "prompt_tokens": 1500,
    "prompt_cache_hit_tokens": 1280,
    "prompt_cache_miss_tokens": 220,
    "total_tokens": 1511,
    "completion_tokens_details": {"reasoning_tokens": 0},
}


def test_deepseek() -> None:
    """DeepSeek's usage has OpenAI's `prompt_tokens` too: its cache hits decide."""
    assert stored({**BASE, "usage": DEEPSEEK_USAGE}) == (1500, 1280, 0, 11, None, "deepseek")
    with_replica = {**BASE, "usage": DEEPSEEK_USAGE, "replica": "r"}
    assert stored(with_replica)[5] == "deepseek"


# --- bad values: a clear error per record, on both paths ------------------------


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        (
            {"usage": {"input_tokens": 5, "cache_read_input_tokens": True}},
            "usage.cache_read_input_tokens must be a whole number >= 0 or null, not True",
        ),
        (
            {"usage": {"input_tokens": -3, "cache_creation_input_tokens": 10}},
            "usage.input_tokens must be a whole number >= 0 or null, not -3",
        ),
        (
            {"usage": {"inputTokens": 5, "cacheWriteInputTokens": "7"}},
            "usage.cacheWriteInputTokens must be a whole number >= 0 or null, not '7'",
        ),
        (
            {"usage": {"inputTokens": 5.0}},
            "usage.inputTokens must be a whole number >= 0 or null, not 5.0",
        ),
        (
            {"usage": {"input_tokens": 5, "cache_creation_input_tokens": 1,
                       "cache_creation": {"ephemeral_1h_input_tokens": "1"}}},
            "usage.cache_creation.ephemeral_1h_input_tokens must be a whole number >= 0 or null",
        ),
        (
            {"usage": {"inputTokens": 5, "cacheWriteInputTokens": 1,
                       "cacheDetails": [{"ttl": "5m", "inputTokens": 0},
                                        {"ttl": "1h", "inputTokens": [1]}]}},
            "usage.cacheDetails[1].inputTokens must be a whole number >= 0 or null, not list",
        ),
        (
            {"usage": {"inputTokens": 2**62, "cacheReadInputTokens": 2**62}},
            "prompt_tokens: 9223372036854775808 is over 1,073,741,824 (2^30) tokens",
        ),
        (
            {"usage": {"prompt_tokens": 10, "prompt_cache_hit_tokens": 11}},
            "cached_tokens must not exceed prompt_tokens",
        ),
        (
            {"usage": {"prompt_tokens": 10,
                       "prompt_tokens_details": {"cached_tokens": 4, "cache_write_tokens": 7}}},
            "cache_write_tokens must not exceed prompt_tokens - cached_tokens",
        ),
        ({"usageMetadata": {"promptTokenCount": "12"}}, "prompt_tokens: Input should be a valid"),
        (
            {"usage_metadata": {"prompt_token_count": 12, "cached_content_token_count": -1}},
            "cached_tokens: Input should be greater than or equal to 0",
        ),
    ],
)  # fmt: skip
def test_a_shape_with_bad_values_is_refused_by_name(shape: dict[str, Any], message: str) -> None:
    assert message in refused({**BASE, **shape})


def test_a_bad_value_the_record_overrides_is_not_read() -> None:
    """Fields on the record win: a usage value they replace is not an error."""
    usage = {"input_tokens": 5, "cache_read_input_tokens": True}
    assert stored({**BASE, "usage": usage, "prompt_tokens": 9, "cached_tokens": 1})[:3] == (
        9,
        1,
        0,
    )
    usage = {"input_tokens": 5, "cache_read_input_tokens": 1, "cache_creation_input_tokens": 1,
             "cache_creation": {"ephemeral_1h_input_tokens": "1"}}  # fmt: skip
    assert stored({**BASE, "usage": usage, "cache_ttl_s": 60})[4] == 60
