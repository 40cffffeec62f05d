"""LiteLLM's `StandardLoggingPayload` (what its `generic_api` logging callback posts,
a JSON array or NDJSON) -> a usage record (contract section 1).

Recognised by LiteLLM's own keys (`call_type`, `startTime`) and no `ts`, so a
contract record is never taken for one. Like every mapping here it renames and
reads; the usual validation decides. docs/integrations.md documents each choice."""

from typing import Any
from urllib.parse import urlsplit

from service.ingest.body import BodyItem
from service.ingest.records import UsageRecordIn
from service.ingest.shapes import (
    ANTHROPIC,
    BEDROCK,
    DEEPSEEK,
    GOOGLE,
    ONE_HOUR_S,
    OPENAI,
    REQUEST_OPTION_KEYS,
    VLLM,
    Invalid,
    openai_if_managed,
    request_ttl,
)
from service.usage_row import TEXT_FIELDS_BY_NAME

DEFAULT_SERVICE = "litellm"
# Record fields a caller may set in its request metadata, as `cachewatch_<field>`
# keys or inside a `cachewatch` object (e.g. the output of `fingerprint()`): every
# field of a record but those LiteLLM itself knows better (the call's id, time,
# model, token counts and timings).
_MEASURED = frozenset(
    {
        "request_id",
        "ts",
        "model",
        "prompt_tokens",
        "cached_tokens",
        "cache_write_tokens",
        "cache_write_1h_tokens",
        "completion_tokens",
        "ttft_ms",
        "latency_ms",
    }
)
METADATA_FIELDS = tuple(name for name in UsageRecordIn.model_fields if name not in _MEASURED)
# LiteLLM's `custom_llm_provider` for the providers that records name otherwise
# (service.ingest.shapes); any other value is kept as it is. Its OpenAI clients
# also serve OpenAI-compatible engines (`api_base`): see `_provider`.
PROVIDER_NAMES = {
    "text-completion-openai": OPENAI,
    "anthropic": ANTHROPIC,
    "bedrock": BEDROCK,
    "gemini": GOOGLE,
    "vertex_ai": GOOGLE,
    "vertex_ai_beta": GOOGLE,
    "deepseek": DEEPSEEK,
    "hosted_vllm": VLLM,
}


def is_litellm_payload(value: Any) -> bool:
    return (
        type(value) is dict and "call_type" in value and "startTime" in value and "ts" not in value
    )


class NoUsage(ValueError):
    """The payload describes no provider request: a failed call, or an answer from
    LiteLLM's own response cache. Rejected with this reason, as everything is."""


def convert_item(item: BodyItem) -> str | None:
    """Replace the item's payload by its record (keeping the payload as sent for the
    rejected store); the rejection reason when there is no record to make."""
    item.raw = item.verbatim()
    try:
        item.value = to_record(item.value)
    except NoUsage as exc:
        return str(exc)
    return None


def to_record(payload: dict[str, Any]) -> dict[str, Any]:
    status = payload.get("status")
    if status not in (None, "success"):
        raise NoUsage(f"LiteLLM call status {status!r}: no usage to record")
    if payload.get("cache_hit") is True:
        raise NoUsage("LiteLLM response-cache hit: no provider request was made")
    metadata = _dict(payload.get("metadata"))
    started = payload.get("startTime")
    record: dict[str, Any] = {
        "request_id": payload.get("id") or payload.get("litellm_call_id"),
        "ts": started,
        "service": _team(metadata) or DEFAULT_SERVICE,
        "model": payload.get("model"),
        "replica": _replica(payload),
        "session_id": payload.get("session_id") or None,
        "cache_key": _dict(payload.get("model_parameters")).get("prompt_cache_key"),
        "tenant": payload.get("end_user") or None,
        "ttft_ms": _millis(payload.get("completionStartTime"), started),
        "latency_ms": _millis(payload.get("endTime"), started),
        "provider": _provider(payload),
    }
    record.update(_tokens(payload, metadata))
    record.update(_caller_fields(metadata))
    return {k: v for k, v in record.items() if v is not None}


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _team(metadata: dict[str, Any]) -> Any:
    """The LiteLLM proxy's team alias, else its key alias: who called."""
    return metadata.get("user_api_key_team_alias") or metadata.get("user_api_key_alias")


#: A replica name is cut to what the column holds.
_REPLICA_CHARS = TEXT_FIELDS_BY_NAME["replica"].max_length


def _api_base(payload: dict[str, Any]) -> str | None:
    """The endpoint called: `api_base`, else `hidden_params.api_base`."""
    for base in (payload.get("api_base"), _dict(payload.get("hidden_params")).get("api_base")):
        if isinstance(base, str) and base:
            return base
    return None


def _replica(payload: dict[str, Any]) -> str | None:
    """Where the KV cache lives: the engine endpoint (api_base, as host[:port]), else
    the router's deployment id. Two deployments of one engine share its cache."""
    hidden = _dict(payload.get("hidden_params"))
    base = _api_base(payload)
    if base is not None:
        try:
            netloc = urlsplit(base).netloc
        except ValueError:
            netloc = ""
        return (netloc or base)[:_REPLICA_CHARS]
    for model_id in (payload.get("model_id"), hidden.get("model_id")):
        if isinstance(model_id, str) and model_id:
            return model_id[:_REPLICA_CHARS]
    return None


def _provider(payload: dict[str, Any]) -> Any:
    """`custom_llm_provider` in the records' names. `openai` (LiteLLM's OpenAI
    client) only when the endpoint is OpenAI's own, or none is named; not a
    string: passed on, for validation to reject."""
    name = payload.get("custom_llm_provider")
    if not isinstance(name, str) or not name:
        return name or None
    provider = PROVIDER_NAMES.get(name, name)
    if provider != OPENAI:
        return provider
    base = _api_base(payload)
    if base is None:
        return openai_if_managed(None)
    try:
        host = urlsplit(base).hostname
    except ValueError:
        host = None
    return openai_if_managed(host or base)  # no scheme: `base` is the host


def _millis(later: Any, earlier: Any) -> Any:
    numbers = (later, earlier)
    if all(isinstance(n, int | float) and not isinstance(n, bool) for n in numbers):
        return max(0.0, (later - earlier) * 1000)
    return None


def _tokens(payload: dict[str, Any], metadata: dict[str, Any]) -> dict[str, Any]:
    """The provider's usage as LiteLLM normalized it (OpenAI form, prompt_tokens
    including cache reads and writes, also for Anthropic): in the response, else
    in `metadata.usage_object` / `hidden_params.usage_object`; else the payload's
    own totals, nothing cached. The cache lifetime: from the usage, else the
    request's `prompt_cache_options.ttl` or `prompt_cache_retention` (one OpenAI
    would refuse asks for nothing here: LiteLLM's payload reports a call made)."""
    response = _dict(payload.get("response"))
    hidden = _dict(payload.get("hidden_params"))
    parameters = _dict(payload.get("model_parameters"))
    ttl = request_ttl(*(parameters.get(k) for k in REQUEST_OPTION_KEYS))
    asked = {"cache_ttl_s": None if isinstance(ttl, Invalid) else ttl}
    for usage in (
        response.get("usage"),
        metadata.get("usage_object"),
        hidden.get("usage_object"),
    ):
        if isinstance(usage, dict) and "prompt_tokens" in usage:
            return {**asked, **_usage_fields(usage)}
    return {
        **asked,
        "prompt_tokens": payload.get("prompt_tokens"),
        "completion_tokens": payload.get("completion_tokens"),
    }


def _usage_fields(usage: dict[str, Any]) -> dict[str, Any]:
    """LiteLLM's `Usage`: the cache reads in `prompt_tokens_details.cached_tokens`
    (else Anthropic's `cache_read_input_tokens`), the writes in its
    `cache_write_tokens` (else `cache_creation_input_tokens`), the one-hour writes
    in `cache_creation_token_details` (else Anthropic's `cache_creation`)."""
    details = _dict(usage.get("prompt_tokens_details"))
    cached = _first_present(details.get("cached_tokens"), usage.get("cache_read_input_tokens"))
    written = _first_present(
        details.get("cache_write_tokens"), usage.get("cache_creation_input_tokens")
    )
    fields = {
        "prompt_tokens": usage.get("prompt_tokens"),
        "cached_tokens": 0 if cached is None else cached,
        "cache_write_tokens": 0 if written is None else written,
        "completion_tokens": usage.get("completion_tokens"),
    }
    for split in (details.get("cache_creation_token_details"), usage.get("cache_creation")):
        one_hour = _dict(split).get("ephemeral_1h_input_tokens")
        if type(one_hour) is int and one_hour >= 0 and type(written) is int:
            fields["cache_write_1h_tokens"] = min(one_hour, written)
            if one_hour > 0:
                fields["cache_ttl_s"] = ONE_HOUR_S
            break
    return fields


def _first_present(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)


def _caller_fields(metadata: dict[str, Any]) -> dict[str, Any]:
    """`cachewatch_<field>` keys and a `cachewatch` object from the caller's
    metadata: `requester_metadata` (the proxy's client request metadata; with the
    SDK, `metadata={"requester_metadata": {...}}`) or `spend_logs_metadata`."""
    fields: dict[str, Any] = {}
    for source in (metadata.get("spend_logs_metadata"), metadata.get("requester_metadata")):
        source = _dict(source)
        nested = _dict(source.get("cachewatch"))
        for name in METADATA_FIELDS:
            for value in (source.get(f"cachewatch_{name}"), nested.get(name)):
                if value is not None:
                    fields[name] = value
    return fields
