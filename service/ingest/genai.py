"""OpenTelemetry GenAI spans and log records -> usage records (contract section 1).

The mapping only renames and reads: values are passed on as found, so the usual
validation (`service.ingest.records`) decides and explains what is wrong with one
(a string token count is rejected, not guessed). docs/integrations.md lists every
attribute read here and why."""

import contextlib
import hashlib
import math
from typing import Any

import orjson

from service.ingest.otlp import OtlpItem
from service.ingest.records import INT64_MAX, UsageRecordIn
from service.ingest.shapes import BEDROCK, GOOGLE, OPENAI, openai_if_managed

# First name present wins: the current semantic conventions, then older names
# still emitted by instrumentations (OpenLLMetry, OpenLIT, older semconv).
INPUT_TOKENS = (
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.prompt_tokens",
    "llm.usage.prompt_tokens",
)
CACHE_READ = (
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.cache_read_input_tokens",
    "gen_ai.usage.input_tokens_details.cached_tokens",
    "llm.usage.cache_read_input_tokens",
)
# Tokens written to the provider's cache (the record's cache_write_tokens). The
# current conventions count them, and cache reads, inside input_tokens ("SHOULD be
# included in gen_ai.usage.input_tokens"): then prompt_tokens = input_tokens.
CACHE_CREATION = ("gen_ai.usage.cache_creation.input_tokens",)
# Anthropic's own field names, as older instrumentations copy them: with one of
# these (and neither cache name of the current conventions), input_tokens is read
# as Anthropic's (uncached part only; contract's Anthropic row): the three add up.
ANTHROPIC_CACHE_CREATION = (
    "gen_ai.usage.cache_creation_input_tokens",
    "llm.usage.cache_creation_input_tokens",
)
# The cache names of the current conventions: with one, they are the counting.
_SEMCONV_CACHE = ("gen_ai.usage.cache_read.input_tokens", *CACHE_CREATION)
# Who served the call: the current name, then the one it replaced.
PROVIDER = ("gen_ai.provider.name", "gen_ai.system")
# The conventions' well-known values (and gen_ai.system's older ones) for the
# providers that records name otherwise (service.ingest.shapes); any other value is
# kept as it is. `openai` is the instrumented client library, whatever answered it
# (the conventions say so): it stays only for OpenAI's API (`openai_if_managed`).
PROVIDER_NAMES = {
    "aws.bedrock": BEDROCK,
    "gcp.gemini": GOOGLE,
    "gcp.vertex_ai": GOOGLE,
    "gcp.gen_ai": GOOGLE,
    "gemini": GOOGLE,
    "vertex_ai": GOOGLE,
}
OUTPUT_TOKENS = (
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.completion_tokens",
    "llm.usage.completion_tokens",
)
MODEL = ("gen_ai.request.model", "gen_ai.response.model")
# OpenLIT records TTFT as a span attribute in seconds.
TTFT_SECONDS = ("gen_ai.server.time_to_first_token",)
# OpenLLMetry adds one event per streamed chunk: the first one is the first token.
FIRST_CHUNK_EVENTS = frozenset({"llm.content.completion.chunk", "gen_ai.completion.chunk"})
PREFIX = "cachewatch."
# `cachewatch.<field>` sets a record field directly and wins over any mapping: every
# field of a record but `ts` and `latency_ms` (the span's own timing) and
# `attributes` (not mapped). In the model's order, which is the record's key order.
_NOT_OVERRIDABLE = frozenset({"ts", "latency_ms", "attributes"})
OVERRIDABLE = tuple(name for name in UsageRecordIn.model_fields if name not in _NOT_OVERRIDABLE)
# Fields whose `cachewatch.*` value stays as sent (the others: a whole double is an int).
_NUMBERS = frozenset({"ttft_ms", "cache_ttl_s"})
_USAGE_NAMES = frozenset(
    (
        *INPUT_TOKENS,
        *CACHE_READ,
        *CACHE_CREATION,
        *ANTHROPIC_CACHE_CREATION,
        *OUTPUT_TOKENS,
        PREFIX + "prompt_tokens",
    )
)


def is_genai(item: OtlpItem) -> bool:
    """A span that reports token usage; an application's other spans are ignored."""
    return not _USAGE_NAMES.isdisjoint(item.attributes)


def to_record(item: OtlpItem) -> dict[str, Any]:
    attrs, resource = item.attributes, item.resource
    record: dict[str, Any] = {
        "request_id": _first(attrs, ("gen_ai.response.id",)) or fallback_id(item),
        "service": resource.get("service.name"),
        "model": _first(attrs, MODEL),
        "deploy": resource.get("service.version"),
        "replica": attrs.get("server.address"),
        "session_id": attrs.get("gen_ai.conversation.id"),
        "completion_tokens": integral(_first(attrs, OUTPUT_TOKENS)),
    }
    if item.start_ns:  # 0 is "unset" in OTLP: then `ts` is missing, and says so
        record["ts"] = item.start_ns
    if item.end_ns >= item.start_ns > 0:
        record["latency_ms"] = (item.end_ns - item.start_ns) / 1e6
    record.update(_tokens(attrs))
    record["provider"] = _provider(attrs)
    ttft = _ttft_ms(item)
    if ttft is not None:
        record["ttft_ms"] = ttft
    record.update(cachewatch_fields(attrs, resource))
    return {k: spelled_if_not_finite(v) for k, v in record.items() if v is not None}


def spelled_if_not_finite(value: Any) -> Any:
    """A NaN or infinite double as OTLP JSON spells it ("NaN", "Infinity",
    "-Infinity"): JSON has no such number, and written as null it would be taken
    for an absent field (a TTFT silently dropped); as a string, validation rejects
    the record and says which field."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def _tokens(attrs: dict[str, Any]) -> dict[str, Any]:
    prompt = integral(_first(attrs, INPUT_TOKENS))
    cached = integral(_first(attrs, CACHE_READ))
    created = integral(_first(attrs, ANTHROPIC_CACHE_CREATION))
    if created is not None and _first(attrs, _SEMCONV_CACHE) is None:
        prompt = total(prompt, cached, created)  # Anthropic's: input_tokens excludes the cache
    else:
        created = integral(_first(attrs, (*CACHE_CREATION, *ANTHROPIC_CACHE_CREATION)))
    return {"prompt_tokens": prompt, "cached_tokens": cached, "cache_write_tokens": created}


def _provider(attrs: dict[str, Any]) -> Any:
    """`gen_ai.provider.name` (else `gen_ai.system`) in the records' names; not a
    string: passed on, for validation to reject."""
    name = _first(attrs, PROVIDER)
    if name == OPENAI:
        return openai_if_managed(attrs.get("server.address"))
    return PROVIDER_NAMES.get(name, name) if isinstance(name, str) else name


def _ttft_ms(item: OtlpItem) -> Any:
    seconds = _first(item.attributes, TTFT_SECONDS)
    if seconds is not None:
        if _is_number(seconds):
            return seconds * 1000
        return seconds  # not a number: validation rejects it and says why
    for name, at_ns in item.events:
        if name in FIRST_CHUNK_EVENTS and at_ns >= item.start_ns > 0:
            return (at_ns - item.start_ns) / 1e6
    return None


def cachewatch_fields(attrs: dict[str, Any], resource: dict[str, Any]) -> dict[str, Any]:
    """`cachewatch.*` attributes of the span, else of the resource."""
    fields: dict[str, Any] = {}
    for name in OVERRIDABLE:
        key = PREFIX + name
        value = attrs[key] if key in attrs else resource.get(key)
        if value is None:
            continue
        if name == "segments" and isinstance(value, str):
            # A JSON string (attributes hold no objects); if it does not parse, the
            # string stays and validation says segments must be a list.
            with contextlib.suppress(orjson.JSONDecodeError):
                value = orjson.loads(value)
        elif name not in _NUMBERS:
            value = integral(value)
        fields[name] = value
    return fields


def _first(attrs: dict[str, Any], names: tuple[str, ...]) -> Any:
    for name in names:
        value = attrs.get(name)
        if value is not None:
            return value
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def integral(value: Any) -> Any:
    """A whole double as an int: JavaScript SDKs send every number as a double."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def total(*values: Any) -> Any:
    present = [v for v in values if v is not None]
    if all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        if values[0] is None:
            return None
        total = sum(present)
        # Beyond the int64 columns: a string, which validation rejects as not an
        # integer (an int orjson could not even write into the body).
        if total > INT64_MAX:
            return f"{total} (over 2^63-1)"
        return total if total >= -INT64_MAX - 1 else f"{total} (under -2^63)"
    return next(v for v in present if not (isinstance(v, int) and not isinstance(v, bool)))


def fallback_id(item: OtlpItem) -> str:
    """trace id + span id: a retried export of the same span is a duplicate. A log
    record outside any span gets a hash of its content, for the same reason."""
    if item.trace_id.strip("0") and item.span_id.strip("0"):
        return item.trace_id + item.span_id
    digest = hashlib.blake2b(item.source.SerializeToString(deterministic=True), digest_size=16)
    return "otlp-" + digest.hexdigest()
