"""`cachewatch demo` tells its story: four harmful releases (three of the corporate
assistant, a cache TTL one of the research assistant on Anthropic's API), each
found, attributed to its release with the right cause, priced, and resolved after
its fix; and a standing problem no release made (the assistant's web chat and API
agent render its system prompt two ways), found as a template drift. Its traffic
has groups: the assistant's ticket summaries (a scenario of their own, 5% of its
tokens, broken for a few hours by a release of their own) and its teams (tenants),
and the time-prefix release goes to a 10% canary an hour before everyone."""

import json
import re
import tomllib
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from service.alerts.money import usd_per_day
from service.demo import (
    CANARY_SHARE,
    RENDERINGS,
    RESEARCH,
    SERVICE,
    TICKET_SUMMARY,
    demo_scenario,
    finding_line,
    groups_line,
    models_file,
    run_demo,
    subject,
)
from service.simulate import SimulationResult, simulate, token_counts
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
            r["group"] and (r["group"]["by"], r["group"]["value"]),
            r["cause"],
            r["attributed_to"]["kind"],
            r["attributed_to"]["deploy"],
            r["attributed_to"]["replicas"],
        )
        for r in regressions
    ]
    assistant, research = "corporate-assistant", "research-assistant"
    ticket, canary = ("scenario", "ticket-summary"), ("deploy", "v3.5.0")
    assert story == [
        (assistant, ticket, "prefix_instability", "deploy", "v3.4.1", None),
        (assistant, canary, "prefix_instability", "deploy", "v3.5.0", None),
        (assistant, None, "prefix_instability", "deploy", "v3.5.0", None),
        (assistant, None, "prefix_instability", "deploy", "v3.6.0", None),
        (assistant, None, "routing", "replicas", None, 4),
        (research, None, "expiry", "deploy", "v7.0.0", None),
    ]
    # Each is resolved after its fix, but the canary: its comparison ended when v3.5.0
    # replaced the older tag (the service's own regression carries the drop from there).
    statuses = [r["status"] for r in regressions]
    assert statuses == ["resolved", "open", "resolved", "resolved", "resolved", "resolved"]
    # The ticket summaries alone lost their prefix: a regression of that scenario and
    # none of the service. The canary was caught at its start, an hour before v3.5.0
    # went to everyone, comparing its 10% with the older tag beside it.
    caught, everyone = regressions[1], regressions[2]
    assert caught["change_ts"].startswith("2025-03-04T10:0")
    assert everyone["change_ts"] == "2025-03-04T11:00:00Z"
    assert caught["attributed_to"]["ts"] == "2025-03-04T10:00:00Z"
    assert caught["canary"]["baseline"] == "v3.4.2"
    assert caught["canary"]["share"] == pytest.approx(CANARY_SHARE, abs=0.02)
    assert caught["before"]["hit_rate"] > 0.7 and caught["after"]["hit_rate"] < 0.05
    assert "- 2025-03-03T11:00:00Z  scenario `ticket-summary` of corporate-assistant  " in printed
    assert "  canary deploy v3.5.0 of corporate-assistant (10% of requests)  hit rate " in printed
    # Both models are priced by the demo's models file: each regression has a cost,
    # and the demo prints it.
    for r in regressions:
        cost = r["cost"]
        assert cost is not None and cost["extra_usd_per_day"] > 0
        assert cost["usd_per_day_after"] == pytest.approx(
            cost["usd_per_day_before"] + cost["extra_usd_per_day"]
        )
    assert printed.count("costs about $") == 6
    assert "cause expiry" in printed
    assert "corporate-assistant: scenarios web-chat " in printed
    time_prefix = " ".join(everyone["evidence"])
    # Before v3.5.0 reached everyone, its canary's time prefix gave the system prompt
    # a variant per second on 10% of the requests; after, one per second everywhere.
    variants = re.search(
        r"segment `system` had (\d+) variants per hour before and (\d+)", time_prefix
    )
    assert variants is not None and 5 * int(variants[1]) < int(variants[2])
    assert any(
        "segment `tools` had 1 variant per hour" in line for line in regressions[3]["evidence"]
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
    for release in ("v3.4.1", "v3.5.0", "v3.6.0", "v7.0.0"):
        assert f"deploy `{release}`" in sent
    assert "`system` went from " in sent and "`tools` went from 1 to" in sent
    assert "the change to 4 replicas" in sent
    # The group regressions name their group; the canary's says how much it served.
    assert "*Regression* scenario `ticket-summary` of `corporate-assistant/" in sent
    assert "Deploy `v3.5.0` served 10% of the requests beside `v3.4.2`" in sent


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
    assert scenario.service("corporate-assistant").renderings == (*RENDERINGS, TICKET_SUMMARY)
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


def test_a_regression_says_whom_it_is_about() -> None:
    whole = {"service": "corporate-assistant", "group": None}
    assert subject(whole) == "corporate-assistant"
    assert subject({**whole, "group": {"by": "scenario", "value": "ticket-summary"}}) == (
        "scenario `ticket-summary` of corporate-assistant"
    )
    assert subject({**whole, "group": {"by": "tenant", "value": "team-001"}}) == (
        "tenant `team-001` of corporate-assistant"
    )
    assert subject({**whole, "group": {"by": "deploy", "value": "v3.5.0"}}) == (
        "canary deploy v3.5.0 of corporate-assistant"
    )
    canary = {"baseline": "v3.4.2", "share": 0.1007, "buckets": 12}
    assert subject({**whole, "group": {"by": "deploy", "value": "v3.5.0"}, "canary": canary}) == (
        "canary deploy v3.5.0 of corporate-assistant (10% of requests)"
    )


@pytest.fixture(scope="module")
def assistant_day() -> list[dict[str, object]]:
    """The demo's first two days (the scenario break and the canary), the assistant's."""
    run = simulate(replace(demo_scenario(), duration_s=2 * 86_400.0))
    return [r for r in run.records if r["service"] == SERVICE]


def test_the_ticket_summaries_are_five_percent_of_the_tokens_and_break_alone(
    assistant_day: list[dict[str, object]],
) -> None:
    tokens: Counter[str] = Counter()
    for record in assistant_day:
        tokens[str(record["scenario"])] += token_counts(record)[0]
    assert 0.04 < tokens["ticket-summary"] / sum(tokens.values()) < 0.065

    def rate(records: list[dict[str, object]]) -> float:
        counts = [token_counts(r) for r in records]
        return sum(c for _, c in counts) / sum(p for p, _ in counts)

    def hours(start: str, end: str, tickets: bool | None) -> float:
        return rate(
            [
                r
                for r in assistant_day
                if start <= str(r["ts"])[:13] < end
                and (tickets is None or (r["scenario"] == "ticket-summary") == tickets)
            ]
        )

    # Day 0: v3.4.1 names the ticket first from 11:00 to 15:00.
    before, during = ("2025-03-03T08", "2025-03-03T11"), ("2025-03-03T11", "2025-03-03T15")
    assert hours(*before, True) > 0.6 and hours(*during, True) < 0.02
    assert abs(hours(*before, False) - hours(*during, False)) < 0.03
    assert 0.01 < hours(*before, None) - hours(*during, None) < 0.06


def test_the_time_prefix_goes_to_a_ten_percent_canary_an_hour_first(
    assistant_day: list[dict[str, object]],
) -> None:
    canary = [r for r in assistant_day if "2025-03-04T10" <= str(r["ts"]) < "2025-03-04T11"]
    tags = Counter(str(r["deploy"]) for r in canary)
    assert set(tags) == {"v3.4.2", "v3.5.0"}
    assert tags["v3.5.0"] / len(canary) == pytest.approx(CANARY_SHARE, abs=0.03)
    after = [r for r in assistant_day if "2025-03-04T11" <= str(r["ts"]) < "2025-03-04T15"]
    assert {r["deploy"] for r in after} == {"v3.5.0"}


def test_the_groups_line_gives_each_scenarios_token_share_and_the_tenants() -> None:
    run = simulate(replace(demo_scenario(peak_rate=0.2), duration_s=12 * 3_600.0))
    line = groups_line(run, SERVICE)
    assert line is not None
    shares = re.fullmatch(
        r"corporate-assistant: scenarios web-chat (\d+)%, api-agent (\d+)%, "
        r"ticket-summary (\d+)% of prompt tokens",
        line,
    )
    assert shares is not None, line
    assert 98 <= sum(int(shares[i]) for i in (1, 2, 3)) <= 102
    assert groups_line(run, RESEARCH) is None
    tenants = [{"service": "x", "tenant": name, "prompt_tokens": 10} for name in "aab"]
    assert groups_line(SimulationResult(tenants, []), "x") == "x: 2 tenants"
