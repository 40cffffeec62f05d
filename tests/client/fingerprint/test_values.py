"""cachewatch_client.fingerprint.values: an id, a time or a user's data inserted into a prompt."""

from typing import Any

import pytest

from cachewatch_client.fingerprint import (
    HintCode,
    explain_divergence,
    fingerprint,
)
from tests.client.fingerprint.helpers import (
    SYSTEM,
    anthropic_request,
    assert_points_at_difference,
    openai_request,
    system_pair,
)


def test_a_timestamp_in_the_system_prompt() -> None:
    a, b = system_pair(
        "Current time: 2026-01-05 10:31:07 UTC.\n" + SYSTEM,
        "Current time: 2026-01-05 10:32:44 UTC.\n" + SYSTEM,
    )
    found = explain_divergence(a, b)
    assert found is not None and found.hint is not None
    assert found.hint.code is HintCode.TIMESTAMP
    assert (found.part, found.path) == ("system", "system[0].content[0].text")
    assert "10:31:07" in found.excerpt_a and "10:32:44" in found.excerpt_b
    assert_points_at_difference(found)
    tools_tokens = fingerprint(a)["segments"][0]["tokens"]
    assert tools_tokens < found.shared_tokens < tools_tokens + 30
    assert "timestamp" in str(found) and "`system`" in str(found)


def test_a_date_in_an_anthropic_system_prompt() -> None:
    a = anthropic_request(system="Today is Monday, January 5, 2026. " + SYSTEM)
    b = anthropic_request(system="Today is Tuesday, January 6, 2026. " + SYSTEM)
    found = explain_divergence(a, b)
    assert found is not None and found.hint is not None
    assert found.hint.code is HintCode.TIMESTAMP and found.part == "system"


def test_a_json_schema_with_another_request_id_const() -> None:
    def schema(request_id: str) -> dict[str, Any]:
        properties = {"requestId": {"type": "string", "const": request_id}, "answer": {}}
        return {
            "type": "json_schema",
            "json_schema": {
                "name": "reply",
                "schema": {"type": "object", "properties": properties},
            },
        }

    found = explain_divergence(
        openai_request(response_format=schema("3f2b1c4e-9a8b-4c7d-8e6f-5a4b3c2d1e0f")),
        openai_request(response_format=schema("7d1e2f3a-4b5c-4d6e-8f70-1a2b3c4d5e6f")),
    )
    assert found is not None and found.hint is not None
    assert found.hint.code is HintCode.REQUEST_ID
    assert found.part == "response_format"
    assert found.path == "response_format.json_schema.schema.properties.requestId.const"
    # an id that looks like nothing special is still named by its key
    short = explain_divergence(
        openai_request(response_format=schema("r1")), openai_request(response_format=schema("r2"))
    )
    assert short is not None and short.hint is not None
    assert short.hint.code is HintCode.REQUEST_ID


UUID_A, UUID_B = "8f3a2c1d-1b2c-4d5e-9f00-aa11bb22cc33", "0c1d2e3f-4a5b-4c6d-8e7f-0123456789ab"


@pytest.mark.parametrize(
    ("a", "b", "code"),
    [
        (f"Request ID: {UUID_A}.", f"Request ID: {UUID_B}.", HintCode.REQUEST_ID),
        ("Customer: alice@example.com.", "Customer: bob@example.org.", HintCode.USER_DATA),
        (
            "You work for Acme Corp. Be brief.",
            "You work for Globex Inc. Be brief.",
            HintCode.USER_DATA,
        ),
        ("Epoch: 1767607867. Be brief.", "Epoch: 1767607999. Be brief.", HintCode.TIMESTAMP),
        ("Be brief.  Be kind.", "Be brief. Be kind.", HintCode.WHITESPACE),
        ("Answer briefly.", "Answer in detail, with examples and references.", None),
    ],
)
def test_values_filled_into_the_system_prompt(a: str, b: str, code: HintCode | None) -> None:
    found = explain_divergence(*system_pair(a, b))
    assert found is not None and found.part == "system"
    assert (found.hint.code if found.hint else None) == code
    if code is None:
        assert "no known anti-pattern" in str(found)
