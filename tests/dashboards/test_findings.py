"""The findings panel's data request: its rows from the findings service over real
traffic stored in the real database (in-process), its wording, and what it says
when the records lack the fields a kind needs."""

from typing import Any

from fastapi.testclient import TestClient

from dashboards.data import FINGERPRINT_DOCS, finding_row, findings_words
from service.findings import MISSING_DATA, Finding, FindingsResult


def finding(**changes: Any) -> Finding:
    fields: dict[str, Any] = {
        "kind": "volatile_segment",
        "service": "assistant",
        "model": "m",
        "since_us": 1_764_399_600_000_000,
        "share_of_prompt_tokens": 0.42,
        "wasted_tokens_per_day": 120_000_000,
        "wasted_usd_per_day": 360.0,
        "evidence": ["segment `system`: 1,740 variants per hour over 1,800 requests"],
        "fix": "keep the time out of the system prompt",
        "segment": "system",
    }
    return Finding(**(fields | changes))


def test_a_row_is_the_contract_json_with_its_dollars_worded() -> None:
    row = finding_row(finding())
    assert row == {**finding().as_json(), "cost": "$360/day"}
    assert row["since"] == "2025-11-29T07:00:00Z"
    assert finding_row(finding(wasted_usd_per_day=None))["cost"] == "no prices"


def test_the_words_say_what_is_missing_and_link_the_fingerprint_docs() -> None:
    words = findings_words(FindingsResult([], ["segments", "replicas"], 2.0), 0.02)
    assert words["note"] == "No anti-pattern affects 2% or more of the prompt tokens."
    assert words["missing"] == [
        {
            "code": "segments",
            "text": "S" + MISSING_DATA["segments"][1:] + ".",
            "docs": FINGERPRINT_DOCS,
        },
        {"code": "replicas", "text": "S" + MISSING_DATA["replicas"][1:] + ".", "docs": None},
    ]
    assert "at least 2% of the prompt tokens" in words["sub"]
    assert "the range's 2 d of data" in words["sub"]
    # With findings there is no note, but what is missing is still said.
    shown = findings_words(FindingsResult([finding()], ["sessions"], 0.5), 0.05)
    assert shown["note"] is None and [m["code"] for m in shown["missing"]] == ["sessions"]
    assert "at least 5%" in shown["sub"] and "12 h of data" in shown["sub"]
    # No records: that alone; nothing is "missing" from nothing.
    empty = findings_words(FindingsResult([], list(MISSING_DATA), 0.0), 0.02)
    assert empty["note"] == "No usage records for these filters in this range."
    assert empty["missing"] == []


def test_the_linked_docs_are_served(client: TestClient) -> None:
    answer = client.get(FINGERPRINT_DOCS["href"])
    assert answer.status_code == 200 and "`segments`" in answer.text
