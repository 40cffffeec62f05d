"""The providers' own usage objects (contract section 1, the usage shape table)
as record fields: both ingest paths derive them here, the validated path
(`records.UsageRecordIn`) and the fast path (`fast`), so they cannot differ.

A record carries the object under `usage`, or Gemini's under `usageMetadata` /
`usage_metadata` (`USAGE_KEYS`, looked at in that order: the first that holds an
object is read). The shape is recognised by its keys, checked in this order
(docs/ingestion.md has the table with every field):

- DeepSeek: `prompt_cache_hit_tokens` (its `prompt_tokens` too);
- OpenAI Chat Completions (also vLLM, SGLang): `prompt_tokens`;
- OpenAI Responses: `input_tokens_details`;
- Anthropic Messages: `cache_read_input_tokens` or `cache_creation_input_tokens`,
  whose `input_tokens` is the uncached part only: the three add up;
- Bedrock Converse: `inputTokens`, likewise the uncached part;
- an Anthropic object without cache fields: `input_tokens` alone, nothing cached;
- Gemini, under its own keys: `promptTokenCount` (`prompt_token_count`), which
  includes the cached tokens; the cached ones in `cachedContentTokenCount`, or
  in the newer `totalCachedTokens` (`total_cached_tokens`) when that is absent;
- Gemini's Interactions API, under `usage`: `total_input_tokens`
  (`totalInputTokens`), the prompt with its cached part, which
  `total_cached_tokens` counts.

A detail that is null or absent counts 0 (providers send null for "none"). A
value copied as it is (a `prompt_tokens`, say) is left for validation to judge;
a value this module must compute with (a sum's parts, the TTL's count) that is
not a count is an `Invalid`, which names it: the validated path raises its
message, the fast path declines. The OpenAI shapes give `openai` only to a
record without a replica: vLLM and SGLang answer in them too, and a managed API
names no replica. The one-hour writes: Anthropic's
`cache_creation.ephemeral_1h_input_tokens`, and likewise Bedrock's `cacheDetails`
entries with `ttl` "1h", give `cache_write_1h_tokens` (its writes priced apart)
and, above 0, a TTL of 3600 s.
"""

import re
from dataclasses import dataclass
from typing import Any

# Provider names as records carry them (contract section 1) and the profiles
# know them (contract section 4a).
OPENAI = "openai"
ANTHROPIC = "anthropic"
GOOGLE = "google"
BEDROCK = "bedrock"
DEEPSEEK = "deepseek"
VLLM = "vllm"

# OpenAI's API: a host in this domain is OpenAI itself, not an engine that answers
# in OpenAI's shapes (`openai_if_managed`).
OPENAI_DOMAIN = "openai.com"
# Where a record carries its provider's usage object, in the order looked at: the
# first holding an object is read, the others are ignored like unknown fields.
USAGE_KEYS = ("usage", "usageMetadata", "usage_metadata")
# The one-hour share of the usage's writes (`usage_fields`).
SPLIT_OF_WRITES = "cache_write_1h_tokens"
# The fields a usage object can give a record; fields on the record win over them.
DERIVED_FIELDS = (
    "prompt_tokens",
    "cached_tokens",
    "completion_tokens",
    "cache_write_tokens",
    "cache_ttl_s",
    "provider",
    SPLIT_OF_WRITES,
)
DERIVED_COUNTS = frozenset((*DERIVED_FIELDS[:4], SPLIT_OF_WRITES))
# Anthropic's (and Bedrock's) one-hour cache, asked for with `"ttl": "1h"`.
ONE_HOUR_S = 3600
# Where a `usage` has its output tokens, first present wins (Gemini: `_GEMINI_*`).
_COMPLETION = ("completion_tokens", "output_tokens", "outputTokens")
# Gemini's (prompt, cached, completion) fields, and the newer name of the cached
# count read where the older is absent: generateContent's `usageMetadata`, then the
# Interactions API's `usage`; each as the REST API (camelCase) and the Python SDK
# (field names) write it.
_GEMINI_CAMEL = ("promptTokenCount", "cachedContentTokenCount", "candidatesTokenCount")
_GEMINI_SNAKE = ("prompt_token_count", "cached_content_token_count", "candidates_token_count")
_GEMINI_TOTAL_CACHED = ("totalCachedTokens", "total_cached_tokens")
_INTERACTIONS_CAMEL = ("totalInputTokens", "totalCachedTokens", "totalOutputTokens")
_INTERACTIONS_SNAKE = ("total_input_tokens", "total_cached_tokens", "total_output_tokens")


@dataclass(frozen=True)
class Invalid:
    """A field a usage object gives but cannot be computed: `message` says why."""

    message: str


def usage_fields(
    usage: dict[str, Any], key: str, replica: Any, own_writes: bool = False
) -> dict[str, Any]:
    """The record fields the usage object `usage`, found under the record's `key`
    (one of USAGE_KEYS), gives a record whose `replica` is this (None: none) and
    that gives its own `cache_write_tokens` or not (`own_writes`: then the usage's
    one-hour share, of other writes, is not given)."""
    fields = _usage_fields(usage, key, replica)
    if own_writes:
        fields.pop(SPLIT_OF_WRITES, None)
    return fields


def _usage_fields(usage: dict[str, Any], key: str, replica: Any) -> dict[str, Any]:
    if key != "usage":
        return _gemini(usage)
    if "prompt_cache_hit_tokens" in usage:
        fields = {"cached_tokens": _or_zero(usage["prompt_cache_hit_tokens"]), "provider": DEEPSEEK}
        if "prompt_tokens" in usage:
            fields["prompt_tokens"] = usage["prompt_tokens"]
    elif "prompt_tokens" in usage:
        fields = _openai(usage, "prompt_tokens", "prompt_tokens_details", replica)
    elif "input_tokens_details" in usage:
        fields = _openai(usage, "input_tokens", "input_tokens_details", replica)
    elif _INTERACTIONS_SNAKE[0] in usage or _INTERACTIONS_CAMEL[0] in usage:
        return _gemini_interactions(usage)
    elif "cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage:
        fields = _anthropic(usage)
    elif "inputTokens" in usage:
        fields = _bedrock(usage)
    elif "input_tokens" in usage:
        fields = {"prompt_tokens": usage["input_tokens"]}
    else:
        fields = {}
    for name in _COMPLETION:
        if usage.get(name) is not None:
            fields["completion_tokens"] = usage[name]
            break
    return fields


#: OpenAI's request parameters a record may carry as sent, for its cache lifetime
#: (`request_ttl`): `prompt_cache_retention` (models before GPT-5.6) and
#: `prompt_cache_options` (GPT-5.6 and later, whose `ttl`, the lifetime asked
#: for, is read first).
REQUEST_OPTION_KEYS = ("prompt_cache_retention", "prompt_cache_options")
#: `prompt_cache_retention`'s values: "24h" asks for a day, "in_memory" for the
#: model's default (no lifetime of its own).
RETENTION_TTL_S: dict[str, int | None] = {"24h": 86_400, "in_memory": None}
_OPTION_TTL = re.compile(r"([1-9][0-9]{0,3})([mh])")


def request_ttl(retention: Any, options: Any) -> int | Invalid | None:
    """The cache lifetime (seconds) OpenAI's request parameters ask for, None for
    the model's default: `prompt_cache_options.ttl` ("30m", the default, or
    "12h"; any "<n>m" or "<n>h") where given, else `prompt_cache_retention`. Absent or null
    parameters ask for nothing; a value OpenAI would refuse is Invalid."""
    ttl = options.get("ttl") if isinstance(options, dict) else None
    if options is not None and not isinstance(options, dict):
        return Invalid("prompt_cache_options must be an object or null")
    if ttl is not None:
        found = _OPTION_TTL.fullmatch(ttl) if isinstance(ttl, str) else None
        if found is None:
            return Invalid(f'prompt_cache_options.ttl must be like "30m", not {str(ttl)[:40]!r}')
        return int(found[1]) * (60 if found[2] == "m" else 3600)
    if retention is None:
        return None
    if not isinstance(retention, str) or retention not in RETENTION_TTL_S:
        return Invalid(
            f'prompt_cache_retention must be "24h" or "in_memory", not {str(retention)[:40]!r}'
        )
    return RETENTION_TTL_S[retention]


def openai_if_managed(host: Any) -> str | None:
    """`openai` for a request that OpenAI's API served: one naming no host (a
    managed API names no replica), or a host of OPENAI_DOMAIN; None for any other
    host, an engine that speaks OpenAI's API (vLLM, SGLang, a gateway)."""
    if host is None:
        return OPENAI
    if isinstance(host, str) and (host == OPENAI_DOMAIN or host.endswith("." + OPENAI_DOMAIN)):
        return OPENAI
    return None


def _openai(usage: dict[str, Any], prompt: str, details: str, replica: Any) -> dict[str, Any]:
    found = usage.get(details)
    parts = found if isinstance(found, dict) else {}
    fields = {
        "prompt_tokens": usage.get(prompt),
        "cached_tokens": _or_zero(parts.get("cached_tokens")),
        "cache_write_tokens": _or_zero(parts.get("cache_write_tokens")),
    }
    if replica is None:
        fields["provider"] = OPENAI
    return fields


def _anthropic(usage: dict[str, Any]) -> dict[str, Any]:
    read = _part(usage, "cache_read_input_tokens")
    created = _part(usage, "cache_creation_input_tokens")
    fields = {
        "prompt_tokens": _total(_part(usage, "input_tokens"), read, created),
        "cached_tokens": read,
        "cache_write_tokens": created,
        "provider": ANTHROPIC,
    }
    detail = usage.get("cache_creation")
    if isinstance(detail, dict):
        one_hour = _part(detail, "ephemeral_1h_input_tokens", "usage.cache_creation.")
        if (share := _share(one_hour, created)) is not None:
            fields[SPLIT_OF_WRITES] = share
        ttl = _one_hour_if(one_hour)
        if ttl is not None:
            fields["cache_ttl_s"] = ttl
    return fields


def _bedrock(usage: dict[str, Any]) -> dict[str, Any]:
    read = _part(usage, "cacheReadInputTokens")
    written = _part(usage, "cacheWriteInputTokens")
    fields = {
        "prompt_tokens": _total(_part(usage, "inputTokens"), read, written),
        "cached_tokens": read,
        "cache_write_tokens": written,
        "provider": BEDROCK,
    }
    details = usage.get("cacheDetails")
    if isinstance(details, list):
        one_hour = _total(*_one_hour_parts(details))
        if (share := _share(one_hour, written)) is not None:
            fields[SPLIT_OF_WRITES] = share
        ttl = _one_hour_if(one_hour)
        if ttl is not None:
            fields["cache_ttl_s"] = ttl
    return fields


def _one_hour_parts(details: list[Any]) -> list[int | Invalid]:
    """The written tokens of Bedrock's `cacheDetails` entries with `ttl` "1h"."""
    return [
        _part(detail, "inputTokens", f"usage.cacheDetails[{i}].")
        for i, detail in enumerate(details)
        if isinstance(detail, dict) and detail.get("ttl") == "1h"
    ]


def _gemini(usage: dict[str, Any]) -> dict[str, Any]:
    """Gemini's `usageMetadata`: the REST API's camelCase, or the Python SDK's
    field names as `model_dump()` writes them (under either key)."""
    names = _GEMINI_CAMEL if _GEMINI_CAMEL[0] in usage else _GEMINI_SNAKE
    if names[0] not in usage:
        return {}
    fields = _google(usage, names)
    if usage.get(names[1]) is None:
        newer = next((usage[n] for n in _GEMINI_TOTAL_CACHED if usage.get(n) is not None), None)
        fields["cached_tokens"] = _or_zero(newer)
    return fields


def _gemini_interactions(usage: dict[str, Any]) -> dict[str, Any]:
    """The usage of Gemini's Interactions API, in either spelling."""
    camel = _INTERACTIONS_CAMEL[0] in usage and _INTERACTIONS_SNAKE[0] not in usage
    return _google(usage, _INTERACTIONS_CAMEL if camel else _INTERACTIONS_SNAKE)


def _google(usage: dict[str, Any], names: tuple[str, str, str]) -> dict[str, Any]:
    prompt, cached, completion = names
    fields = {
        "prompt_tokens": usage[prompt],
        "cached_tokens": _or_zero(usage.get(cached)),
        "provider": GOOGLE,
    }
    if usage.get(completion) is not None:
        fields["completion_tokens"] = usage[completion]
    return fields


def _or_zero(value: Any) -> Any:
    return 0 if value is None else value


def _part(usage: dict[str, Any], name: str, where: str = "usage.") -> int | Invalid:
    """A count the shape computes with: null or absent is 0; anything but a whole
    number >= 0 is Invalid."""
    value = usage.get(name)
    if value is None:
        return 0
    if type(value) is int and value >= 0:
        return value
    shown = repr(value) if isinstance(value, int | float | str | bool) else type(value).__name__
    return Invalid(f"{where}{name} must be a whole number >= 0 or null, not {shown[:40]}")


def _one_hour_if(written: int | Invalid) -> int | Invalid | None:
    """The TTL of tokens written to the one-hour cache: 3600 s when there are any."""
    if isinstance(written, Invalid):
        return written
    return ONE_HOUR_S if written > 0 else None


def _share(part: int | Invalid, bound: int | Invalid) -> int | None:
    """The one-hour share of the writes as the usage gives it, but no more than the
    writes (a usage reporting fewer in all); None (not split) where either is not
    a count: that value's own field says so, unless the record overrides it, and a
    record is not refused over the share alone (it was accepted before it was read)."""
    if isinstance(part, Invalid) or isinstance(bound, Invalid):
        return None
    return min(part, bound)


def _total(*parts: int | Invalid) -> int | Invalid:
    for part in parts:
        if isinstance(part, Invalid):
            return part
    return sum(parts)  # type: ignore[arg-type]  # all ints here
