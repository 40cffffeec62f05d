"""`cachewatch demo` tells its story: four harmful releases (three of the corporate
assistant, a cache TTL one of the research assistant on Anthropic's API), each
found, attributed to its release with the right cause, priced, and resolved after
its fix."""

import json
import tomllib
from pathlib import Path

import pytest

from service.demo import demo_scenario, models_file, run_demo
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
    assert any("segment `system`" in line for line in time_prefix)
    assert any("segment `tools`" in line for line in regressions[1]["evidence"])

    # No webhook configured: the alerts went to the local Slack sink, one section per
    # regression, each naming its release and what changed.
    sink = tmp_path / "slack-messages.jsonl"
    messages = [json.loads(line) for line in sink.read_text().splitlines()]
    sent = json.dumps(messages)
    for release in ("v3.5.0", "v3.6.0", "v7.0.0"):
        assert f"deploy `{release}`" in sent
    assert "`system` went from 1 to" in sent and "`tools` went from 1 to" in sent
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
