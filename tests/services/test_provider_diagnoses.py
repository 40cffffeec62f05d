"""The providers' own miss diagnoses beside cachewatch's, end to end: a simulated
research assistant on Anthropic's API whose callers ask for cache diagnostics
(`service.simulate.diagnostics`, generated from the same prompt changes its
records' fingerprints describe) ships the time at the top of its system prompt
for four hours. The regression cachewatch opens says, beside its own cause, what
the provider said and how often the two agree, in the API, the dashboard's table
and the Slack message; the finding of the range likewise; GET /v1/diagnoses
answers the agreement."""

import dataclasses
import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from dashboards.data import regression_row
from service.alerts.message import opened_message
from service.services.detection import detect
from service.services.regressions import regression_to_json
from service.settings import Settings
from service.simulate import (
    Change,
    DynamicSystemPrefix,
    Scenario,
    SimulationResult,
    StaticSystemPrefix,
    simulate,
    ttl_release_story,
)
from service.simulate.scenario import DAY_S
from tests.simulated import load_records

HOUR = 3600.0
RELEASE, FIX = DAY_S + 12 * HOUR, DAY_S + 16 * HOUR


@pytest.fixture(scope="module")
def story() -> SimulationResult:
    service, _ = ttl_release_story(0.0)
    assert service.managed is not None
    service = dataclasses.replace(
        service,
        managed=dataclasses.replace(service.managed, diagnostics=True),
        peak_rate=0.1,
    )
    timeline = (
        Change(
            RELEASE,
            service.name,
            DynamicSystemPrefix("time"),
            deploy="v7.1.0",
            description="greet users with the current time",
        ),
        Change(
            FIX,
            service.name,
            StaticSystemPrefix(),
            deploy="v7.1.1",
            description="the time goes to the end of the prompt",
        ),
    )
    return simulate(Scenario("diagnosed", (service,), 2 * DAY_S, timeline, seed=5))


def _said(record: dict[str, Any]) -> str | None:
    diagnosis = record.get("diagnostics") or {}
    return (diagnosis.get("cache_miss_reason") or {}).get("type")


def test_the_regression_shows_the_providers_diagnoses_beside_its_cause(
    story: SimulationResult,
    session: Session,
    settings: Settings,
    client: TestClient,
    read_headers: dict[str, str],
) -> None:
    said = [_said(r) for r in story.records if r.get("deploy") == "v7.1.0"]
    assert said.count("system_changed") > 0.5 * len(said)  # the provider's truth
    load_records(session, story.records, story.events)
    session.commit()
    report = detect(session, settings)
    found = [regression_to_json(r) for r in report.created]
    prefix = next(r for r in found if r["attributed_to"]["deploy"] == "v7.1.0")
    evidence = prefix["evidence"]
    print(prefix["cause"], json.dumps(evidence, indent=1))
    summary = evidence[1]
    assert summary.startswith("provider diagnoses after the change: it named a reason for ")
    agreed = float(summary.rsplit("(", 1)[1].split("%")[0]) / 100
    assert agreed >= 0.9
    assert any(
        line.startswith("provider said `system_changed`")
        and "cachewatch agrees on" in line
        and "prefix_instability in `system`" in line
        for line in evidence
    )
    # Beside the cause in the dashboard's table (its first two lines) and in Slack.
    assert regression_row(prefix, "sent")["evidence"][1] == summary
    slack = json.dumps(opened_message(prefix, "http://cachewatch.test").payload())
    assert "provider diagnoses after the change" in slack

    answer = client.get(
        "/v1/diagnoses", params={"service": prefix["service"]}, headers=read_headers
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    system = next(r for r in body["reasons"] if r["reason"] == "system_changed")
    sent = sum(1 for r in story.records if _said(r) == "system_changed")
    assert system["requests"] == sent
    assert system["share"] >= 0.9 and body["share"] >= 0.9

    findings = client.get(
        "/v1/findings", params={"service": prefix["service"]}, headers=read_headers
    ).json()
    print([(f["kind"], f["segment"], f["evidence"]) for f in findings])
    volatile = next(f for f in findings if f["kind"] == "volatile_segment")
    assert volatile["segment"] == "system"
    assert any(
        line.startswith("provider said `system_changed`") for line in volatile["evidence"]
    ), volatile["evidence"]
