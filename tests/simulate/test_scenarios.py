"""Scenarios with a prompt of their own (`Rendering(prompt=...)`): a `ticket-summary`
beside the chat, with its own system prompt and response format, its records naming
it; and a prompt change for that one scenario (`Change(scenario=...)`): its hit rate
falls, the chat's does not, and the service's moves by a few points only."""

from collections import Counter, defaultdict
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
    token_counts,
)
from tests.simulate.analysis import bucket_hit_rates

HOUR = 3600.0
CHAT = PromptStructure(
    system_tokens=900,
    tool_tokens=(60,) * 6,
    query=LengthDist(120, 0.5, 5, 2000),
    tool_result=LengthDist(600, 0.6, 20, 4000),
    reply=LengthDist(250, 0.5, 5, 2000),
    turns_mean=5,
    think_time_s=LengthDist(30, 0.6, 2, 600),
)
#: One request per session: a long instruction and output schema, then the ticket.
TICKET = PromptStructure(
    system_tokens=2_000,
    response_format_tokens=300,
    query=LengthDist(800, 0.4, 50, 4000),
    reply=LengthDist(150, 0.4, 10, 800),
    turns_mean=1.0,
    max_turns=1,
)
SCENARIOS = (
    Rendering("web-chat", 0.4),
    Rendering("api-agent", 0.2, system_extra_tokens=1),
    Rendering("ticket-summary", 0.4, prompt=TICKET),
)
#: The ticket summaries name their ticket at the top of their system prompt from
#: 1 h to 2 h (a release), then no more (its fix).
BREAK = (
    Change(1 * HOUR, "assistant", DynamicSystemPrefix("request"), "v2", scenario="ticket-summary"),
    Change(2 * HOUR, "assistant", StaticSystemPrefix(), "v3", scenario="ticket-summary"),
)


def scenario(*timeline: Change, peak_rate: float = 3.0) -> Scenario:
    service = Service(
        name="assistant",
        model="m",
        prompt=CHAT,
        peak_rate=peak_rate,
        curve=DailyCurve.flat(),
        replicas=1,
        kv_tokens=None,
        block_size=64,
        renderings=SCENARIOS,
    )
    return Scenario("scenarios", (service,), 3 * HOUR, timeline, seed=11)


@pytest.fixture(scope="module")
def result() -> SimulationResult:
    return simulate(scenario(*BREAK))


def system_of(record: dict[str, Any]) -> dict[str, Any]:
    return next(s for s in record["segments"] if s["name"] == "system")


def hit_rates(records: list[dict[str, Any]]) -> list[float]:
    """Hit rate per half hour of the three hours."""
    rates = bucket_hit_rates(records, 1800.0, scenario().start).hit_rate
    return [float(r) for r in rates]


def test_records_name_their_scenario_by_the_session_shares(result: SimulationResult) -> None:
    sessions: dict[str, str] = {}
    for record in result.records:
        previous = sessions.setdefault(record["session_id"], record["scenario"])
        assert previous == record["scenario"]
    counts = Counter(sessions.values())
    total = sum(counts.values())
    assert total > 2000
    for rendering in SCENARIOS:
        assert counts[rendering.scenario] / total == pytest.approx(rendering.share, abs=0.03)
    # A ticket summary is one request; a chat session is about five turns.
    tickets = [r for r in result.records if r["scenario"] == "ticket-summary"]
    assert len(tickets) == counts["ticket-summary"]


def test_peak_rate_stays_the_turns_per_second_of_all_scenarios(result: SimulationResult) -> None:
    # 3 turns/s over 3 hours; the geometric turns are capped, so a little fewer.
    assert 0.85 * 3.0 * 3 * HOUR < len(result.records) < 1.05 * 3.0 * 3 * HOUR


def test_a_prompt_of_its_own_has_its_own_start(result: SimulationResult) -> None:
    before = [r for r in result.records if r["deploy"] == "v1.0.0"]
    starts: dict[str, set[tuple[str, str, int]]] = defaultdict(set)
    names: dict[str, set[tuple[str, ...]]] = defaultdict(set)
    for record in before:
        system = system_of(record)
        starts[record["scenario"]].add((system["hash"], system["norm_hash"], system["tokens"]))
        static = [s["name"] for s in record["segments"] if not s["name"].startswith("message")]
        names[record["scenario"]].add(tuple(static))
    ((ticket_hash, ticket_norm, ticket_tokens),) = starts["ticket-summary"]
    ((web_hash, web_norm, _),) = starts["web-chat"]
    ((api_hash, api_norm, _),) = starts["api-agent"]
    assert ticket_tokens == 2_000
    # The two chat renderings share a norm_hash; the ticket summary's is its own (its
    # text as it is: no other scenario renders it).
    assert web_norm == api_norm and len({web_hash, api_hash, ticket_hash}) == 3
    assert ticket_norm == ticket_hash != web_norm
    assert names["ticket-summary"] == {("system", "response_format")}
    assert names["web-chat"] == {("system", "tools")}
    # About 6% of the prompt tokens are ticket summaries': one short request each.
    tokens = Counter[str]()
    for record in result.records:
        tokens[record["scenario"]] += token_counts(record)[0]
    assert 0.03 < tokens["ticket-summary"] / sum(tokens.values()) < 0.10


def test_breaking_one_scenario_drops_its_hit_rate_only(result: SimulationResult) -> None:
    """From 1 h to 2 h a request id leads the ticket summaries' system prompt: their
    hit rate falls to about nothing, the chat's stays, and the service's moves by a
    few points, less than any regression threshold."""
    by_scenario: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in result.records:
        by_scenario[record["scenario"]].append(record)
    ticket = hit_rates(by_scenario["ticket-summary"])
    chat = hit_rates(by_scenario["web-chat"] + by_scenario["api-agent"])
    service = hit_rates(result.records)
    # Half hours 2 and 3 are broken; 0 is the cold start.
    assert min(ticket[1], ticket[4], ticket[5]) > 0.6 and max(ticket[2:4]) < 0.02
    assert min(chat[1:]) > 0.8 and np.ptp(chat[1:]) < 0.03
    level = np.mean([service[1], service[4]])
    fall = level - np.mean(service[2:4])
    assert 0.02 < fall < 0.08 and fall / level < 0.1
    broken = [r for r in by_scenario["ticket-summary"] if r["deploy"] == "v2"]
    assert len({system_of(r)["hash"] for r in broken}) == len(broken)


def test_a_prompt_change_without_scenario_reaches_every_scenario() -> None:
    everyone = (
        Change(1 * HOUR, "assistant", DynamicSystemPrefix("time")),
        Change(2 * HOUR, "assistant", StaticSystemPrefix()),
    )
    run = simulate(scenario(*everyone, peak_rate=1.0))
    during = [r for r in run.records if "01:00:00" <= r["ts"][11:19] < "02:00:00"]
    for name in ("web-chat", "api-agent", "ticket-summary"):
        systems = [system_of(r)["hash"] for r in during if r["scenario"] == name]
        assert len(set(systems)) > 0.5 * len(systems) > 50


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (
            lambda: Change(60.0, "assistant", DynamicSystemPrefix(), scenario="nope"),
            "has no scenario 'nope'",
        ),
        (
            lambda: Change(60.0, "assistant", KvBudget(1000), scenario="ticket-summary"),
            "only a prompt change can apply to one scenario",
        ),
    ],
)
def test_a_change_for_one_scenario_is_checked(make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        simulate(scenario(make()))


def test_a_prompt_of_its_own_renders_no_extra_tokens() -> None:
    with pytest.raises(ValueError, match="renders no extra tokens"):
        Rendering("x", 1.0, system_extra_tokens=1, prompt=TICKET)


def test_a_deploy_for_one_scenario_tags_every_record() -> None:
    """The release tag is the service's: a release that changes one scenario's prompt
    tags the records of all its scenarios."""
    run = simulate(scenario(Change(0.5 * HOUR, "assistant", Deploy(), "v2"), peak_rate=1.0))
    later = [r for r in run.records if r["ts"][11:19] >= "00:30:00"]
    assert {r["deploy"] for r in later} == {"v2"}
    assert {r["scenario"] for r in later} == {"web-chat", "api-agent", "ticket-summary"}
