"""A service whose callers render its prompt two ways (`Rendering`): each session
takes one, its records name it as their `scenario`, the `system` segment has a hash
per rendering and one `norm_hash`, and the cache is split from the system prompt on;
the sessions open when they would without renderings."""

from collections import Counter, defaultdict
from dataclasses import replace
from typing import Any

import pytest

from service.ingest.records import UsageRecordIn
from service.simulate import (
    Change,
    DailyCurve,
    DynamicSystemPrefix,
    Fanout,
    LengthDist,
    PromptStructure,
    Rendering,
    Scenario,
    Service,
    SimulationResult,
    StaticSystemPrefix,
    simulate,
)

HOUR = 3600.0
RENDERINGS = (Rendering("web-chat", 0.6), Rendering("api-agent", 0.4, system_extra_tokens=1))


def scenario(renderings: tuple[Rendering, ...] = RENDERINGS, *changes: Change) -> Scenario:
    service = Service(
        name="assistant",
        model="m",
        prompt=PromptStructure(
            system_tokens=700,
            tool_tokens=(50,) * 6,
            query=LengthDist(120, 0.5, 5, 2000),
            reply=LengthDist(200, 0.5, 5, 2000),
            turns_mean=4,
            think_time_s=LengthDist(20, 0.5, 2, 600),
        ),
        peak_rate=3.0,
        curve=DailyCurve.flat(),
        replicas=2,
        routing="prefix_affinity",
        block_size=64,
        renderings=renderings,
    )
    fanout = Change(0.2 * HOUR, "assistant", Fanout(k=4, context_tokens=500, share=0.2))
    return Scenario("renderings", (service,), HOUR, (fanout, *changes), seed=5)


@pytest.fixture(scope="module")
def result() -> SimulationResult:
    return simulate(scenario())


def system_of(record: dict[str, Any]) -> dict[str, Any]:
    return next(s for s in record["segments"] if s["name"] == "system")


def test_each_session_keeps_one_scenario_drawn_by_the_shares(result: SimulationResult) -> None:
    by_session: dict[str, set[str]] = defaultdict(set)
    for record in result.records:
        assert record["scenario"] in ("web-chat", "api-agent")
        if "session_id" in record:
            by_session[record["session_id"]].add(record["scenario"])
    assert all(len(names) == 1 for names in by_session.values())
    sessions = Counter(next(iter(names)) for names in by_session.values())
    share = sessions["web-chat"] / sum(sessions.values())
    assert len(by_session) > 500 and 0.55 < share < 0.65, sessions
    # A fanned-out task's calls (no session_id) carry their session's scenario too.
    calls = [r for r in result.records if "session_id" not in r]
    assert calls and {r["scenario"] for r in calls} == {"web-chat", "api-agent"}


def test_the_renderings_differ_in_hash_and_share_the_norm_hash(result: SimulationResult) -> None:
    systems: dict[str, set[tuple[str, str, int]]] = defaultdict(set)
    tools: set[tuple[str, str]] = set()
    for record in result.records:
        system = system_of(record)
        systems[record["scenario"]].add((system["hash"], system["norm_hash"], system["tokens"]))
        tool = next(s for s in record["segments"] if s["name"] == "tools")
        tools.add((tool["hash"], tool["norm_hash"]))
        for part in record["segments"]:
            assert ("norm_hash" in part) == (not part["name"].startswith("message")), part
    assert len(systems["web-chat"]) == len(systems["api-agent"]) == 1
    ((web_hash, web_norm, web_tokens),) = systems["web-chat"]
    ((api_hash, api_norm, api_tokens),) = systems["api-agent"]
    assert web_hash != api_hash and web_norm == api_norm
    assert (web_tokens, api_tokens) == (700, 701)
    # The other parts are rendered one way: one hash, its own norm_hash.
    assert len(tools) == 1 and len({h for pair in tools for h in pair}) == 1


def test_the_cache_is_split_from_the_system_prompt_on(result: SimulationResult) -> None:
    first_blocks: dict[str, set[int]] = defaultdict(set)
    for record in result.records:
        first_blocks[record["scenario"]].add(record["block_hashes"][0])
    assert len(first_blocks["web-chat"]) == len(first_blocks["api-agent"]) == 1
    assert first_blocks["web-chat"].isdisjoint(first_blocks["api-agent"])
    # The api-agent prompts are one token longer than the same request's web-chat one.
    assert all(
        r["prompt_tokens"] >= 701 + 300 for r in result.records if r["scenario"] == "api-agent"
    )


def test_ingest_reads_the_scenario(result: SimulationResult) -> None:
    for record in result.records[:200]:
        assert UsageRecordIn.model_validate(record).scenario == record["scenario"]


def test_renderings_leave_the_other_draws_of_the_run_as_they_were() -> None:
    """The same sessions open at the same times with or without renderings: the draw
    of a session's rendering comes from a stream of its own. (What follows differs:
    a rendering's misses change a turn's TTFT, hence when the next turn comes.)"""

    def openings(run: SimulationResult) -> list[tuple[str, str]]:
        seen: dict[str, str] = {}
        for record in run.records:
            if "session_id" in record:
                seen.setdefault(record["session_id"], record["ts"])
        return sorted(seen.items())

    without = simulate(scenario(()))
    assert all("scenario" not in r for r in without.records)
    assert all("norm_hash" not in s for r in without.records for s in r["segments"])
    assert openings(without) == openings(simulate(scenario()))


def test_a_dynamic_prefix_varies_the_norm_hash_too() -> None:
    """The time at the top of the system prompt is no rendering: the norm_hash varies
    with it, shared by the renderings within one second."""
    timeline = (
        Change(0.5 * HOUR, "assistant", DynamicSystemPrefix("time")),
        Change(0.75 * HOUR, "assistant", StaticSystemPrefix()),
    )
    run = simulate(scenario(RENDERINGS, *timeline))
    during = [r for r in run.records if "00:30:00" <= r["ts"][11:19] < "00:45:00"]
    norms: dict[str, set[str]] = defaultdict(set)
    for record in during:
        norms[record["ts"][:19]].add(system_of(record)["norm_hash"])
    assert len({n for group in norms.values() for n in group}) > 100
    assert all(len(group) == 1 for group in norms.values())
    after = {system_of(r)["norm_hash"] for r in run.records if r["ts"][11:19] >= "00:46:00"}
    assert len(after) == 1


@pytest.mark.parametrize(
    ("renderings", "message"),
    [
        ((Rendering("a", 0.5), Rendering("a", 0.5)), "two renderings name one scenario"),
    ],
)
def test_a_service_refuses_two_renderings_of_one_scenario(
    renderings: tuple[Rendering, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        scenario(renderings)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"scenario": "", "share": 1.0}, "needs a scenario name"),
        ({"scenario": "a", "share": 0.0}, "share must be > 0"),
        ({"scenario": "a", "share": 1.0, "system_extra_tokens": -1}, "must be >= 0"),
    ],
)
def test_a_rendering_is_checked(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Rendering(**options)


def test_one_rendering_names_a_scenario_and_sends_norm_hashes() -> None:
    run = simulate(replace(scenario((Rendering("only", 1.0),)), duration_s=600.0))
    assert {r["scenario"] for r in run.records} == {"only"}
    assert all("norm_hash" in system_of(r) for r in run.records)
