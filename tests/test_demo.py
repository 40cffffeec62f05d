"""`cachewatch demo` tells its story: four harmful releases (three of the corporate
assistant, a cache TTL one of the research assistant on Anthropic's API), each
found, attributed to its release with the right cause, priced, and resolved after
its fix; and a standing problem no release made (the assistant's web chat and API
agent render its system prompt two ways), found as a template drift."""

import json
import tomllib
from pathlib import Path

import pytest

from service.alerts.money import usd_per_day
from service.demo import RENDERINGS, demo_scenario, finding_line, models_file, run_demo
from tests.conftest import free_port, is_postgres_run


@pytest.mark.skipif(is_postgres_run(), reason="the demo runs on the embedded SQLite database")
def test_demo_story(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("CACHEWATCH_SLACK_WEBHOOK_URL", raising=False)
    regressions = run_demo(tmp_path, free_port(), keep_serving=False)
    printed = capsys.readouterr().out
    story = [
        (
            r["service"],
            r["cause"],
            r["attributed_to"]["kind"],
            r["attributed_to"]["deploy"],
            r["attributed_to"]["replicas"],
            r["status"],
        )
        for r in regressions
    ]
    assistant, research = "corporate-assistant", "research-assistant"
    assert story == [
        (assistant, "prefix_instability", "deploy", "v3.5.0", None, "resolved"),
        (assistant, "prefix_instability", "deploy", "v3.6.0", None, "resolved"),
        (assistant, "routing", "replicas", None, 4, "resolved"),
        (research, "expiry", "deploy", "v7.0.0", None, "resolved"),
    ]
    # Both models are priced by the demo's models file: each regression has a cost,
    # and the demo prints it.
    for r in regressions:
        cost = r["cost"]
        assert cost is not None and cost["extra_usd_per_day"] > 0
        assert cost["usd_per_day_after"] == pytest.approx(
            cost["usd_per_day_before"] + cost["extra_usd_per_day"]
        )
    assert printed.count("costs about $") == 4
    assert "cause expiry" in printed
    time_prefix = regressions[0]["evidence"]
    # Two renderings of the system prompt before v3.5.0, thousands of variants after.
    assert any("segment `system` had 2 variants per hour before" in line for line in time_prefix)
    assert any(
        "segment `tools` had 1 variant per hour" in line for line in regressions[1]["evidence"]
    )

    # Then the findings, worst first, one line each: the two renderings of the system
    # prompt are a template drift of the corporate assistant, priced.
    findings = printed.split(" findings, worst first (")[1].split("\n\nalerts: ")[0]
    lines = findings.splitlines()[1:]
    assert lines and all(line.startswith("- ") for line in lines)
    [drift] = [line for line in lines if line.startswith("- template_drift  corporate-assistant")]
    assert drift.startswith("- template_drift  corporate-assistant `system`  ")
    assert "% of prompt tokens  $" in drift and "/day  fix: render `system` through one" in drift

    # No webhook configured: the alerts went to the local Slack sink, one section per
    # regression, each naming its release and what changed.
    sink = tmp_path / "slack-messages.jsonl"
    messages = [json.loads(line) for line in sink.read_text().splitlines()]
    sent = json.dumps(messages)
    for release in ("v3.5.0", "v3.6.0", "v7.0.0"):
        assert f"deploy `{release}`" in sent
    assert "`system` went from 2 to" in sent and "`tools` went from 1 to" in sent
    assert "the change to 4 replicas" in sent


def test_the_models_file_prices_every_model_and_gives_the_managed_one_its_rules() -> None:
    scenario = demo_scenario()
    rules = tomllib.loads(models_file(scenario))["model"]
    by_model = {rule["match"]: rule for rule in rules}
    assert set(by_model) == {spec.model for spec in scenario.services}
    for spec in scenario.services:
        rule = by_model[spec.model]
        prices = [rule[f"{kind}_usd_per_mtok"] for kind in ("write", "input", "cached")]
        assert prices == sorted(prices, reverse=True) and prices[-1] > 0
        if spec.managed is None:
            assert not {"provider", "ttl_s", "min_prompt_tokens"} & set(rule)
        else:
            assert rule["provider"] == "anthropic"
            assert (rule["ttl_s"], rule["min_prompt_tokens"]) == (300, 1024)


def test_the_assistant_is_rendered_two_ways_from_the_first_minute() -> None:
    scenario = demo_scenario()
    assert scenario.service("corporate-assistant").renderings == RENDERINGS
    assert [(r.scenario, r.system_extra_tokens) for r in RENDERINGS] == [
        ("web-chat", 0),
        ("api-agent", 1),
    ]
    assert scenario.service("research-assistant").renderings == ()


def test_a_finding_line_says_kind_service_segment_since_share_dollars_and_fix() -> None:
    finding = {
        "kind": "template_drift",
        "service": "corporate-assistant",
        "model": "acme-chat-70b",
        "segment": "system",
        "since": "2025-03-03T00:00:00Z",
        "share_of_prompt_tokens": 0.4,
        "wasted_usd_per_day": 1240.5,
        "fix": "render `system` through one code path",
    }
    assert finding_line(finding) == (
        "- template_drift  corporate-assistant `system`  since 2025-03-03T00:00:00Z  "
        "40% of prompt tokens  $1,241/day  fix: render `system` through one code path"
    )
    unpriced = finding_line({**finding, "segment": None, "wasted_usd_per_day": None})
    assert unpriced == (
        "- template_drift  corporate-assistant  since 2025-03-03T00:00:00Z  40% of prompt "
        f"tokens  {usd_per_day(None)}  fix: render `system` through one code path"
    )
