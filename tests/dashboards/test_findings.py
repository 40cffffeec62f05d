"""The findings panel's data request: its rows from the findings service over real
traffic stored in the real database (in-process), its wording, and what it says
when the records lack the fields a kind needs."""

from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from dashboards.data import FINDINGS_DOCS, FINGERPRINT_DOCS, finding_row, findings_words
from service.alerts.money import usd_per_day
from service.api.app import create_app
from service.findings import MISSING_DATA, Finding, FindingsResult
from service.settings import Settings
from tests.dashboards.helpers import CACHED_USD, INPUT_USD
from tests.services import findings_traffic
from tests.services.traffic import store


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
    answer = client.get(FINDINGS_DOCS["href"])
    assert answer.status_code == 200 and "`template_drift`" in answer.text


def as_service(records: list[dict[str, Any]], service: str) -> list[dict[str, Any]]:
    """The records sent by another service (their own request ids)."""
    return [r | {"service": service, "request_id": f"{service}-{r['request_id']}"} for r in records]


def findings_of(client: TestClient, **params: str) -> dict[str, Any]:
    answer = client.get("/dashboard/data/findings", params=params)
    assert answer.status_code == 200, answer.text
    return answer.json()


@pytest.fixture
def reader(priced_client: TestClient, read_headers: dict[str, str]) -> TestClient:
    """The dashboard app pricing model `m`, with a read token."""
    priced_client.headers.update(read_headers)
    return priced_client


@pytest.fixture
def two_services(session: Session) -> None:
    """`assistant` (scenario web-chat) and `agent` (scenario api-agent) send the
    same system prompt (one `norm_hash`) rendered two ways; `search` puts a timestamp
    in its system prompt. Model `m` is priced (the dashboard tests' models file)."""
    drift = findings_traffic.template_drift()
    store(session, [r | {"service": "agent"} if r["scenario"] == "api-agent" else r for r in drift])
    store(session, as_service(findings_traffic.volatile_segment(), "search"))
    session.commit()


@pytest.mark.usefixtures("two_services")
def test_the_panel_lists_the_views_findings_worst_first_as_the_api_answers_them(
    reader: TestClient,
) -> None:
    payload = findings_of(reader)
    rows = payload["findings"]
    assert [(r["kind"], r["service"], r["segment"]) for r in rows] == [
        ("volatile_segment", "search", "system"),
        ("template_drift", "agent", "system"),
    ]
    wasted = [r["wasted_tokens_per_day"] for r in rows]
    assert wasted == sorted(wasted, reverse=True) and wasted[-1] > 0
    # The same findings as GET /v1/findings over the view's range, their dollars worded.
    api = reader.get(
        "/v1/findings",
        params={"from": rows[0]["since"], "to": "2099-01-01T00:00:00Z"},
    ).json()
    assert [{k: v for k, v in r.items() if k != "cost"} for r in rows] == api
    for row in rows:
        assert row["wasted_usd_per_day"] > 0  # model m has prices
        assert row["cost"] == usd_per_day(row["wasted_usd_per_day"])
        assert row["evidence"] and row["fix"]
    drift = rows[1]
    # Found across the model's services: the one sending the minority rendering has
    # it on every request; the evidence names who sends each variant.
    text = "\n".join(drift["evidence"])
    assert "the same `norm_hash`" in text
    assert "sent by `assistant` (scenario `web-chat`)" in text
    assert "sent by `agent` (scenario `api-agent`)" in text
    assert drift["share_of_prompt_tokens"] == 1.0
    # Priced at what a miss costs above a hit on model m (contract section 4a).
    miss_over_hit = (INPUT_USD - CACHED_USD) / 1e6
    for row in rows:
        assert row["wasted_usd_per_day"] == pytest.approx(
            row["wasted_tokens_per_day"] * miss_over_hit
        )
    assert payload["note"] is None
    # Standalone requests: no sessions; everything else is there.
    assert [m["code"] for m in payload["missing"]] == ["sessions"]
    assert payload["missing"][0]["text"].startswith("Send `session_id` to see")
    assert "at least 2% of the prompt tokens" in payload["sub"]


@pytest.mark.usefixtures("two_services")
def test_the_filters_select_the_findings(
    reader: TestClient,
) -> None:
    agent = findings_of(reader, service="agent")
    assert [(r["kind"], r["service"]) for r in agent["findings"]] == [("template_drift", "agent")]
    # The most used rendering is no finding of its sender.
    assistant = findings_of(reader, service="assistant")
    assert assistant["findings"] == []
    assert assistant["note"] == "No anti-pattern affects 2% or more of the prompt tokens."
    # A range before the traffic: nothing there, said so.
    before = findings_of(reader, **{"from": "2025-11-28T00:00:00Z", "to": "2025-11-29T00:00:00Z"})
    assert before["findings"] == [] and before["missing"] == []
    assert before["note"] == "No usage records for these filters in this range."
    unknown = findings_of(reader, model="nobody")
    assert unknown["findings"] == [] and unknown["note"] == before["note"]


def test_with_data_and_no_finding_the_panel_says_so(reader: TestClient, session: Session) -> None:
    store(session, findings_traffic.healthy())
    session.commit()
    payload = findings_of(reader)
    assert payload["findings"] == [] and payload["missing"] == []
    assert payload["note"] == "No anti-pattern affects 2% or more of the prompt tokens."


def test_the_threshold_is_the_settings(
    priced_settings: Settings,
    session_factory: sessionmaker[Session],
    session: Session,
    read_headers: dict[str, str],
) -> None:
    store(session, findings_traffic.healthy())
    session.commit()
    app = create_app(priced_settings.model_copy(update={"finding_min_share": 0.05}))
    app.state.sessionmaker = session_factory
    with TestClient(app, headers=read_headers) as client:
        payload = findings_of(client)
    assert payload["note"] == "No anti-pattern affects 5% or more of the prompt tokens."
    assert "at least 5% of the prompt tokens" in payload["sub"]


def test_records_without_segments_are_told_to_send_them_with_the_docs(
    reader: TestClient, session: Session
) -> None:
    records = [
        {k: v for k, v in r.items() if k not in ("segments", "ttft_ms", "replica")}
        for r in findings_traffic.routing()
    ]
    store(session, records)
    session.commit()
    payload = findings_of(reader)
    missing = {m["code"]: m for m in payload["missing"]}
    assert list(missing) == ["segments", "replicas", "ttft"]
    assert missing["segments"] == {
        "code": "segments",
        "text": "Send `segments` to see which part of the prompt varies.",
        "docs": {"title": "docs/fingerprint.md", "href": "/docs/fingerprint.md"},
    }
    assert missing["replicas"]["docs"] is None
    assert reader.get(missing["segments"]["docs"]["href"]).status_code == 200


@pytest.mark.usefixtures("two_services")
def test_the_panel_lists_the_worst_and_counts_the_rest(
    reader: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32: 20,000 one-request services made a 13 MB answer; the panel lists
    the MAX_FINDING_ROWS worst and says how many more there are."""
    import dashboards.data

    monkeypatch.setattr(dashboards.data, "MAX_FINDING_ROWS", 1)
    payload = findings_of(reader, nonce="capped")
    assert [(r["kind"], r["service"]) for r in payload["findings"]] == [
        ("volatile_segment", "search")
    ]
    assert payload["total"] == 2 and payload["more"] == 1
    assert payload["more_note"] == (
        "1 more finding not shown (the 1 that waste the most are; GET /v1/findings "
        "lists every one)."
    )
