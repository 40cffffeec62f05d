"""The providers' own miss diagnostics on a record (service.ingest.diagnoses),
built from the providers' SDK types as their responses carry them: every path
(pydantic, the fast path's line and dict decoders, bulk) stores the same reason
and estimate, and a malformed object is refused with its reason."""

from typing import Any

from anthropic.types import (
    CacheMissMessagesChanged,
    CacheMissPreviousMessageNotFound,
    CacheMissSystemChanged,
    Diagnostics,
)
from openai.types.responses.response import (
    PromptCacheDiagnosticsCacheHit,
    PromptCacheDiagnosticsCacheMiss,
)

from tests.ingest.test_provider_shapes import BASE, refused, stored_row

RECORD = {**BASE, "prompt_tokens": 5000, "cached_tokens": 0}


def diagnosis(record: dict[str, Any]) -> tuple[Any, Any]:
    """(provider_miss_reason, provider_missed_tokens) as every path stored them."""
    row = stored_row(record)
    return row["provider_miss_reason"], row["provider_missed_tokens"]


def anthropic(reason: Any) -> dict[str, Any]:
    return Diagnostics(cache_miss_reason=reason).model_dump(mode="json")


def test_anthropic_diagnostics_as_the_sdk_gives_them() -> None:
    changed = CacheMissSystemChanged(type="system_changed", cache_missed_input_tokens=4200)
    assert diagnosis({**RECORD, "diagnostics": anthropic(changed)}) == ("system_changed", 4200)
    messages = CacheMissMessagesChanged(type="messages_changed", cache_missed_input_tokens=0)
    assert diagnosis({**RECORD, "diagnostics": anthropic(messages)}) == ("messages_changed", 0)
    gone = CacheMissPreviousMessageNotFound(type="previous_message_not_found")
    assert diagnosis({**RECORD, "diagnostics": anthropic(gone)}) == (
        "previous_message_not_found",
        None,
    )


def test_pending_or_absent_diagnostics_store_nothing() -> None:
    assert diagnosis({**RECORD, "diagnostics": anthropic(None)}) == (None, None)
    assert diagnosis({**RECORD, "diagnostics": None}) == (None, None)
    assert diagnosis({**RECORD, "prompt_cache_diagnostics": None}) == (None, None)
    assert diagnosis(RECORD) == (None, None)


def test_openai_prompt_cache_diagnostics_as_the_sdk_gives_them() -> None:
    miss = PromptCacheDiagnosticsCacheMiss(
        type="cache_miss", reason="tools_changed", cache_missed_tokens=900
    ).model_dump(mode="json")
    assert diagnosis({**RECORD, "prompt_cache_diagnostics": miss}) == ("tools_changed", 900)
    hit = PromptCacheDiagnosticsCacheHit(type="cache_hit").model_dump(mode="json")
    assert diagnosis({**RECORD, "prompt_cache_diagnostics": hit}) == ("cache_hit", None)


def test_a_reason_not_known_yet_is_kept_as_sent() -> None:
    new = {"cache_miss_reason": {"type": "thinking_changed", "cache_missed_input_tokens": 7}}
    assert diagnosis({**RECORD, "diagnostics": new}) == ("thinking_changed", 7)


def test_the_records_own_fields_win() -> None:
    changed = CacheMissSystemChanged(type="system_changed", cache_missed_input_tokens=4200)
    given = {**RECORD, "diagnostics": anthropic(changed), "provider_miss_reason": "tools_changed"}
    assert diagnosis(given) == ("tools_changed", None)
    assert diagnosis({**RECORD, "provider_miss_reason": "x", "provider_missed_tokens": 3}) == (
        "x",
        3,
    )


def test_malformed_diagnostics_are_refused_with_their_reason() -> None:
    assert "diagnostics must be an object or null" in refused({**RECORD, "diagnostics": "x"})
    bad_type = {"cache_miss_reason": {"type": 3}}
    assert "diagnostics.cache_miss_reason.type must be a string" in refused(
        {**RECORD, "diagnostics": bad_type}
    )
    bad_tokens = {"type": "cache_miss", "reason": "tools_changed", "cache_missed_tokens": -1}
    assert "prompt_cache_diagnostics.cache_missed_tokens must be an integer >= 0" in refused(
        {**RECORD, "prompt_cache_diagnostics": bad_tokens}
    )
    long_reason = {"cache_miss_reason": {"type": "x" * 51}}
    assert "1 to 50 characters" in refused({**RECORD, "diagnostics": long_reason})
