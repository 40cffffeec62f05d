"""The providers' own miss diagnostics as record fields: both ingest paths read
them here, the validated path (`records.UsageRecordIn`) and the fast path
(`fast`), so they cannot differ (docs/providers.md, "Providers' own miss
diagnostics", has the sources).

A record may carry the object as its provider's response gave it, at the top
level beside `usage`:

- Anthropic's `diagnostics` (when the request sent `diagnostics.previous_message_id`;
  the beta header `cache-diagnosis-2026-04-07` is no longer required):
  `{"cache_miss_reason": {"type": "system_changed", "cache_missed_input_tokens": 1200}}`;
  `cache_miss_reason` null means the comparison was still running: nothing is
  stored;
- OpenAI's `prompt_cache_diagnostics` (Responses API, GPT-5.6 and later):
  `{"type": "cache_miss", "reason": "tools_changed", "cache_missed_tokens": 900}`,
  or a `type` alone (`cache_hit`, `comparison_response_not_found`, `unavailable`).

They give `provider_miss_reason` (Anthropic's `type`; OpenAI's `reason` for a
`cache_miss`, else its `type`) and `provider_missed_tokens` (the provider's
estimate, null when it gives none), unless the record gives those fields
itself. A null object, or none, gives nothing. A reason is kept as the provider
spells it, also one cachewatch does not know yet (`service.diagnoses.reasons`
says which it compares); an object of the wrong shape is `Invalid`, and the
record is refused with its message.
"""

from typing import Any

from service.ingest.shapes import Invalid
from service.usage_row import TEXT_FIELDS_BY_NAME

#: The record keys holding a provider's diagnosis, in the order looked at: the
#: first holding an object is read.
DIAGNOSIS_KEYS = ("diagnostics", "prompt_cache_diagnostics")
#: The record fields they give.
REASON = "provider_miss_reason"
MISSED = "provider_missed_tokens"
DIAGNOSIS_FIELDS = (REASON, MISSED)
#: The longest reason stored: the column's width.
MAX_REASON_LENGTH = TEXT_FIELDS_BY_NAME[REASON].max_length


def diagnosis_fields(anthropic: Any, openai: Any) -> dict[str, Any] | Invalid:
    """The record fields of Anthropic's `diagnostics` and OpenAI's
    `prompt_cache_diagnostics` as sent (None: absent or null): {} when neither
    names anything."""
    if anthropic is not None:
        return _anthropic(anthropic)
    if openai is not None:
        return _openai(openai)
    return {}


def _anthropic(value: Any) -> dict[str, Any] | Invalid:
    if not isinstance(value, dict):
        return Invalid("diagnostics must be an object or null")
    reason = value.get("cache_miss_reason")
    if reason is None:
        return {}  # still pending when the response was written
    if not isinstance(reason, dict):
        return Invalid("diagnostics.cache_miss_reason must be an object or null")
    return _fields(
        reason.get("type"),
        reason.get("cache_missed_input_tokens"),
        "diagnostics.cache_miss_reason.type",
        "diagnostics.cache_miss_reason.cache_missed_input_tokens",
    )


def _openai(value: Any) -> dict[str, Any] | Invalid:
    if not isinstance(value, dict):
        return Invalid("prompt_cache_diagnostics must be an object or null")
    kind = value.get("type")
    if kind == "cache_miss":
        return _fields(
            value.get("reason"),
            value.get("cache_missed_tokens"),
            "prompt_cache_diagnostics.reason",
            "prompt_cache_diagnostics.cache_missed_tokens",
        )
    return _fields(kind, None, "prompt_cache_diagnostics.type", "")


def _fields(reason: Any, missed: Any, reason_at: str, missed_at: str) -> dict[str, Any] | Invalid:
    if not isinstance(reason, str) or not 1 <= len(reason) <= MAX_REASON_LENGTH or "\x00" in reason:
        return Invalid(f"{reason_at} must be a string of 1 to {MAX_REASON_LENGTH} characters")
    if missed is not None and (type(missed) is not int or missed < 0):
        return Invalid(f"{missed_at} must be an integer >= 0 or null")
    return {REASON: reason, MISSED: missed}
