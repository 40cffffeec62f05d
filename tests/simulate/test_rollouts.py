"""Rollouts (`Change(share=...)`): a release goes to a share of the requests first (a
canary: its tag and its prompt change, beside the old tag and old prompt in the same
minutes), then to all of them; it can widen or roll back; its deploy event is posted
at the canary's start."""

from collections import Counter, defaultdict
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from service.simulate import (
    Change,
    DailyCurve,
    Deploy,
    DynamicSystemPrefix,
    KvBudget,
    LengthDist,
    PromptStructure,
    Rendering,
    Scenario,
    Service,
    SimulationResult,
    StaticSystemPrefix,
    simulate,
)
from service.simulate.events import walk_timeline
from tests.simulate.analysis import bucket_hit_rates

HOUR = 3600.0
NAME = "assistant"
#: v2 puts the time at the top of the system prompt: to 10% of the requests at 1 h,
#: to all of them at 2 h.
CANARY = (
    Change(1 * HOUR, NAME, DynamicSystemPrefix("time"), deploy="v2", share=0.1),
    Change(2 * HOUR, NAME, Deploy(), deploy="v2"),
)


def scenario(*timeline: Change, hours: float = 3.0) -> Scenario:
    service = Service(
        name=NAME,
        model="m",
        prompt=PromptStructure(
            system_tokens=800,
            tool_tokens=(50,) * 6,
            query=LengthDist(120, 0.5, 5, 2000),
            tool_result=LengthDist(400, 0.6, 20, 3000),
            reply=LengthDist(200, 0.5, 5, 2000),
            turns_mean=5,
            think_time_s=LengthDist(30, 0.6, 2, 600),
        ),
        peak_rate=3.0,
        curve=DailyCurve.flat(),
        replicas=1,
        kv_tokens=None,
        block_size=64,
        deploy="v1",
    )
    return Scenario("rollouts", (service,), hours * HOUR, timeline, seed=2)


@pytest.fixture(scope="module")
def canary() -> SimulationResult:
    return simulate(scenario(*CANARY))


def between(records: list[dict[str, Any]], start: str, end: str) -> list[dict[str, Any]]:
    return [r for r in records if start <= r["ts"][11:19] < end]


def system_hash(record: dict[str, Any]) -> str:
    return str(next(s["hash"] for s in record["segments"] if s["name"] == "system"))


def test_the_canary_takes_its_share_of_the_requests(canary: SimulationResult) -> None:
    during = between(canary.records, "01:00:00", "02:00:00")
    tags = Counter(r["deploy"] for r in during)
    assert set(tags) == {"v1", "v2"} and len(during) > 5000
    assert tags["v2"] / len(during) == pytest.approx(0.1, abs=0.015)
    assert {r["deploy"] for r in between(canary.records, "00:00:00", "01:00:00")} == {"v1"}
    assert {r["deploy"] for r in between(canary.records, "02:00:00", "03:00:00")} == {"v2"}


def test_old_and_new_tags_serve_side_by_side_every_minute(canary: SimulationResult) -> None:
    minutes: dict[str, set[str]] = defaultdict(set)
    sessions: dict[str, set[str]] = defaultdict(set)
    for record in between(canary.records, "01:00:00", "02:00:00"):
        minutes[record["ts"][11:16]].add(record["deploy"])
        sessions[record["session_id"]].add(record["deploy"])
    assert len(minutes) == 60 and all(tags == {"v1", "v2"} for tags in minutes.values())
    # Drawn request by request, as a load balancer's weights split them.
    assert sum(len(tags) == 2 for tags in sessions.values()) > 100


def test_only_the_canary_carries_its_prompt_change(canary: SimulationResult) -> None:
    during = between(canary.records, "01:00:00", "02:00:00")
    old = {system_hash(r) for r in during if r["deploy"] == "v1"}
    new = [system_hash(r) for r in during if r["deploy"] == "v2"]
    assert len(old) == 1 and old.isdisjoint(new)
    assert len(set(new)) > 0.5 * len(new)  # the time, to the second
    after = between(canary.records, "02:00:00", "03:00:00")
    assert old.isdisjoint(system_hash(r) for r in after)


def test_the_canary_hit_rate_falls_below_the_old_tags_while_the_service_holds(
    canary: SimulationResult,
) -> None:
    """Per 5-minute bucket while both serve: the canary misses its whole prompt,
    the old tag does not; the service moves by about a tenth of that (the old tag's
    turns after a canary turn miss that turn too), well below the 20% relative drop
    a regression needs."""
    start = scenario().start

    def rates(records: list[dict[str, Any]]) -> np.ndarray:
        return bucket_hit_rates(records, 300.0, start).hit_rate

    during = between(canary.records, "00:00:00", "02:00:00")
    old = rates([r for r in during if r["deploy"] == "v1"])
    new = rates([r for r in during if r["deploy"] == "v2"])[12:24]
    service = rates(during)
    assert np.all(old[2:24] > 0.8) and np.all(new < 0.1)
    level = np.mean(service[2:12])
    fall = level - np.mean(service[12:24])
    assert 0.05 < fall < 0.12 and fall / level < 0.14
    everyone = rates(between(canary.records, "02:00:00", "03:00:00"))
    assert np.nanmax(everyone) < 0.15


def test_the_deploy_event_is_posted_at_the_canary_start_and_at_full_rollout(
    canary: SimulationResult,
) -> None:
    assert [(e["ts"][11:19], e["deploy"], e["description"]) for e in canary.events] == [
        ("01:00:00", "v2", "release v2 (canary: 10% of requests)"),
        ("02:00:00", "v2", "release v2 (rolled out to all requests)"),
    ]


def test_a_canary_widens_and_rolls_back() -> None:
    timeline = (
        Change(0.25 * HOUR, NAME, DynamicSystemPrefix("time"), deploy="v2", share=0.1),
        Change(0.5 * HOUR, NAME, Deploy(), deploy="v2", share=0.5),
        Change(0.75 * HOUR, NAME, Deploy(), deploy="v2", share=0.0),
    )
    run = simulate(scenario(*timeline, hours=1.0))
    wide = between(run.records, "00:30:00", "00:45:00")
    new = [r for r in wide if r["deploy"] == "v2"]
    assert len(new) / len(wide) == pytest.approx(0.5, abs=0.04)
    assert len({system_hash(r) for r in new}) > 0.5 * len(new)  # the change is kept
    back = between(run.records, "00:45:00", "01:00:00")
    assert {r["deploy"] for r in back} == {"v1"} and len({system_hash(r) for r in back}) == 1
    # The rollback posts nothing: the old release was never gone.
    assert [e["description"] for e in run.events] == [
        "release v2 (canary: 10% of requests)",
        "release v2 (canary: 50% of requests)",
    ]


def test_a_change_without_a_tag_acts_on_both_releases() -> None:
    timeline = (
        Change(0.25 * HOUR, NAME, DynamicSystemPrefix("time"), deploy="v2", share=0.2),
        Change(0.5 * HOUR, NAME, StaticSystemPrefix()),
    )
    run = simulate(scenario(*timeline, hours=1.0))
    later = between(run.records, "00:30:00", "01:00:00")
    assert {r["deploy"] for r in later} == {"v1", "v2"}
    assert len({system_hash(r) for r in later}) == 1


def test_a_healthy_canary_has_the_old_tags_hit_rate() -> None:
    run = simulate(scenario(Change(1 * HOUR, NAME, Deploy(), deploy="v2", share=0.1), hours=2.0))
    during = between(run.records, "01:10:00", "02:00:00")
    rates = {}
    for tag in ("v1", "v2"):
        mine = [r for r in during if r["deploy"] == tag]
        rates[tag] = sum(r["cached_tokens"] for r in mine) / sum(r["prompt_tokens"] for r in mine)
    assert rates["v1"] > 0.8 and rates["v2"] == pytest.approx(rates["v1"], abs=0.03)


@pytest.mark.parametrize(
    ("timeline", "message"),
    [
        ((Change(60.0, NAME, Deploy(), deploy="v2", share=0.0),), "which is no running canary"),
        ((Change(60.0, NAME, Deploy(), deploy="v1", share=0.1),), "already the stable tag"),
    ],
)
def test_rollouts_are_checked(timeline: tuple[Change, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        simulate(scenario(*timeline))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"share": 0.1}, "needs a deploy tag"),
        ({"share": 1.5, "deploy": "v2"}, "within \\[0, 1\\]"),
        ({"action": KvBudget(1000), "share": 0.5, "deploy": "v2"}, "only a prompt change"),
    ],
)
def test_a_rollout_share_is_checked(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Change(**{"at_s": 60.0, "service": NAME, "action": Deploy(), **options})


def test_the_truth_of_a_rollout_says_its_share_and_scenario() -> None:
    timeline = (
        *CANARY,
        Change(2.5 * HOUR, NAME, DynamicSystemPrefix("request"), "v3", scenario="chat", share=0.2),
        Change(2.75 * HOUR, NAME, Deploy(), deploy="v3", share=0.0),
    )
    service = replace(scenario().services[0], renderings=(Rendering("chat", 1.0),))
    truth = [text for _, text in walk_timeline(Scenario("t", (service,), HOUR, timeline))]
    assert truth == [
        "system prompt now starts with the current time (10% of requests)",
        "release with no serving or prompt change",
        "scenario chat: system prompt now starts with a request id (20% of requests)",
        "release with no serving or prompt change (rolled back)",
    ]
