"""The seasonal world: a production-shaped test of a regression detector.

Eight services on five models over two weeks from a Monday 00:00 UTC: self-hosted
ones (replicas, prefix-affinity routing, KV budgets) and managed-API ones
(Anthropic-style prompt cache, 5-minute TTL, 1,024-token minimum), busy weekdays,
quiet evenings, nights and weekends, tens of tenants, a few scenarios, noisy
`cached_tokens`, a decoy deploy a day on most services, and, at seeded times,
real regressions (`World.expected`, the ground truth) beside things that must
not be reported (`World.benign`): a 5-minute glitch, the nightly TTL lull of the
managed services, the decoys, one agent session that dominates a quiet Sunday
morning of a small service. `world_story` writes the timeline.

    service             model (serving)                             regression
    assistant           acme-70b-instruct (4 replicas, affinity)    (a) time atop the prompt
    search-agent        acme-70b-instruct (3 replicas, affinity)    (b) staged shuffled tools
    support-bot         claude-sonnet-4-5 (5m TTL, 60 tenants)      (d) one tenant's own break
    ticket-triage       qwen2.5-32b-instruct (2 replicas)           (c) Friday, 40 minutes
    research-assistant  claude-sonnet-4-5 (1h TTL)                  (f) TTL 1 h -> 5 min
    code-review         llama-3.1-8b-instruct (1 replica)           (e) slow eviction erosion
    sql-copilot         mistral-small-24b-instruct (1 replica)      (g) 4 round-robin; KV cut
    email-drafter       claude-sonnet-4-5 (5m TTL, small)           none: lull, Sunday session

A detector is measured on it by `service.simulate.replay` (bench/detection.py
--world): precision and recall summed over seeds.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from service.simulate.builders import ExpectedChange, ttl_release_story
from service.simulate.scenario import (
    DAY_S,
    DEFAULT_START,
    AgentSession,
    DailyCurve,
    LengthDist,
    ManagedProvider,
    PromptStructure,
    Rendering,
    Scenario,
    Service,
    Tenants,
)

#: code-review's KV budget per user turn per second of its peak rate below which
#: its weekday peak starts to lose history to eviction (5-minute dips of its hit
#: rate; measured over seeds 0-3), and the headroom it has in its first week (no
#: such dip over three weekdays).
KV_FITS_PEAK_PER_RATE = 1_400_000
KV_HEADROOM = 1.4

#: The models: two self-hosted services share the first, three managed ones the second.
ACME, SONNET, QWEN, LLAMA, MISTRAL = (
    "acme-70b-instruct",
    "claude-sonnet-4-5",
    "qwen2.5-32b-instruct",
    "llama-3.1-8b-instruct",
    "mistral-small-24b-instruct",
)


@dataclass(frozen=True)
class Benign:
    """Something in the world that is not a regression, for reading a detector's
    false positives: `label` says what ("glitch", "decoy", "agent-session")."""

    service: str
    at_s: float
    until_s: float
    label: str
    description: str


@dataclass(frozen=True)
class World:
    """A scenario, the regressions a detector should report on it, and what it must
    not report."""

    scenario: Scenario
    expected: tuple[ExpectedChange, ...]
    benign: tuple[Benign, ...]
    seed: int

    @property
    def days(self) -> float:
        return self.scenario.duration_s / DAY_S


def _curve(rnd: random.Random, start: float = 7.0, end: float = 20.0) -> DailyCurve:
    """Busy weekdays, quiet nights (5-15% of the peak) and weekends (25-50%)."""
    return DailyCurve(
        night=round(rnd.uniform(0.05, 0.15), 3),
        start_hour=start + rnd.uniform(-0.5, 0.5),
        end_hour=end + rnd.uniform(-1.0, 1.0),
        shape=1.5,
        weekend=round(rnd.uniform(0.25, 0.5), 3),
    )


def _rate(rnd: random.Random, base: float, scale: float) -> float:
    return round(base * scale * rnd.uniform(0.85, 1.15), 4)


def assistant(rnd: random.Random, scale: float) -> Service:
    """The company assistant: the biggest service, 80 customer organisations."""
    prompt = PromptStructure(
        system_tokens=rnd.randint(1_800, 2_600),
        tool_tokens=tuple(rnd.randint(50, 120) for _ in range(12)),
        query=LengthDist(120, 0.6, 5, 4_000),
        tool_result=LengthDist(rnd.uniform(600, 900), 0.7, 20, 6_000),
        reply=LengthDist(300, 0.5, 10, 4_000),
        turns_mean=rnd.uniform(5.0, 7.0),
        max_turns=30,
        think_time_s=LengthDist(45, 0.8, 3, 1_800),
    )
    return Service(
        name="assistant",
        model=ACME,
        prompt=prompt,
        peak_rate=_rate(rnd, 0.55, scale),
        curve=_curve(rnd),
        users=4_000,
        replicas=4,
        routing="prefix_affinity",
        kv_tokens=2_097_152,
        cache_key="session",
        deploy="v3.0.0",
        renderings=(Rendering("web", 0.7), Rendering("api", 0.3, system_extra_tokens=1)),
        tenants=Tenants(80, zipf_s=1.0, prefix="org-"),
        read_miss_rate=0.02,
    )


def search_agent(rnd: random.Random, scale: float) -> Service:
    """A search agent (many tools) with a summarizing scenario of its own prompt."""
    prompt = PromptStructure(
        system_tokens=rnd.randint(1_000, 1_400),
        tool_tokens=tuple(rnd.randint(80, 200) for _ in range(15)),
        query=LengthDist(100, 0.6, 5, 2_000),
        tool_result=LengthDist(rnd.uniform(700, 1_000), 0.7, 20, 8_000),
        reply=LengthDist(250, 0.5, 10, 3_000),
        turns_mean=rnd.uniform(4.0, 6.0),
        max_turns=25,
        think_time_s=LengthDist(30, 0.8, 3, 1_200),
    )
    summarize = PromptStructure(
        system_tokens=rnd.randint(900, 1_300),
        response_format_tokens=300,
        query=LengthDist(2_500, 0.5, 200, 12_000),
        reply=LengthDist(300, 0.5, 20, 2_000),
        turns_mean=1.5,
        max_turns=4,
        think_time_s=LengthDist(20, 0.6, 2, 600),
    )
    return Service(
        name="search-agent",
        model=ACME,
        prompt=prompt,
        peak_rate=_rate(rnd, 0.35, scale),
        curve=_curve(rnd),
        users=2_000,
        replicas=3,
        routing="prefix_affinity",
        kv_tokens=2_097_152,
        cache_key="session",
        deploy="v5.0.0",
        renderings=(Rendering("search", 0.65), Rendering("summarize", 0.35, prompt=summarize)),
        tenants=Tenants(50, zipf_s=0.9, prefix="team-"),
        read_miss_rate=0.02,
    )


def support_bot(rnd: random.Random, scale: float) -> Service:
    """A customer-support bot on Anthropic's API, 60 customer accounts, three
    channels rendering its prompt each their own way; some users pause longer than
    the 5-minute TTL between turns, and at night a channel's start expires between
    its sparse sessions (a nightly TTL lull)."""
    prompt = PromptStructure(
        system_tokens=rnd.randint(2_500, 3_500),
        tool_tokens=tuple(rnd.randint(100, 200) for _ in range(6)),
        query=LengthDist(150, 0.6, 5, 2_000),
        reply=LengthDist(350, 0.5, 10, 3_000),
        turns_mean=rnd.uniform(3.5, 5.0),
        max_turns=20,
        think_time_s=LengthDist(90, 0.9, 5, 1_800),
    )
    return Service(
        name="support-bot",
        model=SONNET,
        prompt=prompt,
        peak_rate=_rate(rnd, 0.3, scale),
        curve=_curve(rnd, 6.0, 22.0),
        users=5_000,
        cache_key=None,
        deploy="v2.0.0",
        managed=ManagedProvider("anthropic", ttl="5m", min_prompt_tokens=1_024),
        renderings=(
            Rendering("chat", 0.6),
            Rendering("email", 0.3, system_extra_tokens=2),
            Rendering("voice", 0.1, system_extra_tokens=3),
        ),
        tenants=Tenants(60, zipf_s=1.1, prefix="acct-"),
        read_miss_rate=0.03,
    )


def ticket_triage(rnd: random.Random, scale: float) -> Service:
    """Ticket triage: short sessions over a pasted ticket (hit rate about 0.72), and
    a `reply-draft` scenario of its own prompt holding about a third of its tokens."""
    prompt = PromptStructure(
        system_tokens=rnd.randint(2_000, 2_400),
        tool_tokens=tuple(rnd.randint(60, 120) for _ in range(5)),
        query=LengthDist(700, 0.6, 50, 6_000),
        reply=LengthDist(200, 0.5, 10, 2_000),
        turns_mean=1.6,
        max_turns=6,
        think_time_s=LengthDist(40, 0.7, 3, 900),
    )
    draft = PromptStructure(
        system_tokens=rnd.randint(1_800, 2_200),
        response_format_tokens=250,
        query=LengthDist(600, 0.6, 50, 6_000),
        reply=LengthDist(400, 0.5, 20, 3_000),
        turns_mean=1.8,
        max_turns=6,
        think_time_s=LengthDist(40, 0.7, 3, 900),
    )
    return Service(
        name="ticket-triage",
        model=QWEN,
        prompt=prompt,
        peak_rate=_rate(rnd, 0.35, scale),
        curve=_curve(rnd),
        users=1_500,
        replicas=2,
        routing="prefix_affinity",
        kv_tokens=1_048_576,
        cache_key="session",
        deploy="v1.4.0",
        renderings=(Rendering("triage", 0.73), Rendering("reply-draft", 0.27, prompt=draft)),
        tenants=Tenants(30, zipf_s=1.0, prefix="desk-"),
        read_miss_rate=0.1,
    )


def research_assistant(rnd: random.Random, scale: float) -> Service:
    """`builders.ttl_release_story`'s research assistant (ten-minute pauses between
    turns, a 1-hour cache TTL until its release shortens it); `world_story` places
    the release."""
    service, _ = ttl_release_story(0.0, name="research-assistant", model=SONNET)
    curve = replace(_curve(rnd), night=0.08)
    return replace(service, peak_rate=_rate(rnd, 0.07, scale), curve=curve)


def code_review(rnd: random.Random, scale: float) -> Service:
    """Code review: long append-only sessions on a long static start, each turn a
    file of about 1,200 tokens (hit rate about 0.95), used from early to late (CI
    runs at night too), on one replica whose KV budget holds the working set of its
    weekday peak with some headroom (KV_HEADROOM): a smaller one loses the peak's
    history first."""
    prompt = PromptStructure(
        system_tokens=rnd.randint(8_500, 9_500),
        tool_tokens=tuple(rnd.randint(100, 200) for _ in range(8)),
        query=LengthDist(80, 0.6, 5, 1_000),
        tool_result=LengthDist(1_200, 0.4, 100, 6_000),
        reply=LengthDist(250, 0.5, 10, 2_000),
        turns_mean=14.0,
        max_turns=40,
        think_time_s=LengthDist(45, 0.3, 10, 900),
    )
    # Its working set, hence where its KV budget falls short, depends on more than
    # the rate: the session lengths stay put, the rate varies little.
    rate = round(0.3 * scale * rnd.uniform(0.95, 1.05), 4)
    kv = int(rate * KV_FITS_PEAK_PER_RATE * KV_HEADROOM) // 256 * 256
    return Service(
        name="code-review",
        model=LLAMA,
        prompt=prompt,
        peak_rate=rate,
        curve=replace(
            _curve(rnd, 6.0, 22.0),
            night=round(rnd.uniform(0.12, 0.15), 3),
            weekend=round(rnd.uniform(0.4, 0.5), 3),
        ),
        users=800,
        replicas=1,
        routing="prefix_affinity",
        kv_tokens=kv,
        cache_key="session",
        deploy="v0.9.0",
    )


def sql_copilot(rnd: random.Random, scale: float) -> Service:
    """A SQL copilot on one replica: a per-user schema in the prompt, sessions whose
    history is most of their tokens (round-robin over more replicas loses it)."""
    prompt = PromptStructure(
        system_tokens=rnd.randint(1_200, 1_600),
        tool_tokens=tuple(rnd.randint(60, 100) for _ in range(6)),
        user_context_tokens=800,
        query=LengthDist(100, 0.6, 5, 1_500),
        tool_result=LengthDist(600, 0.7, 20, 5_000),
        reply=LengthDist(250, 0.5, 10, 2_000),
        turns_mean=rnd.uniform(7.0, 9.0),
        max_turns=30,
        think_time_s=LengthDist(40, 0.8, 3, 1_200),
    )
    return Service(
        name="sql-copilot",
        model=MISTRAL,
        prompt=prompt,
        peak_rate=_rate(rnd, 0.3, scale),
        curve=_curve(rnd),
        users=600,
        replicas=1,
        routing="round_robin",
        kv_tokens=2_097_152,
        cache_key="user",
        deploy="v2.3.0",
        tenants=Tenants(12, zipf_s=1.2, prefix="db-"),
    )


def email_drafter(rnd: random.Random, scale: float) -> Service:
    """A small single-shot e-mail drafter on Anthropic's API: its shared start lives
    only while requests come within 5 minutes, so its hit rate dips every night and
    weekend (the nightly TTL lull)."""
    prompt = PromptStructure(
        system_tokens=rnd.randint(2_400, 2_800),
        tool_tokens=tuple(rnd.randint(120, 180) for _ in range(4)),
        response_format_tokens=200,
        query=LengthDist(400, 0.6, 20, 4_000),
        reply=LengthDist(300, 0.5, 10, 2_000),
        turns_mean=1.3,
        max_turns=4,
        think_time_s=LengthDist(60, 0.7, 5, 900),
    )
    return Service(
        name="email-drafter",
        model=SONNET,
        prompt=prompt,
        peak_rate=_rate(rnd, 0.04, scale),
        curve=_curve(rnd),
        users=3_000,
        cache_key=None,
        deploy="v1.0.0",
        managed=ManagedProvider("anthropic", ttl="5m", min_prompt_tokens=1_024),
        tenants=Tenants(15, zipf_s=1.0, prefix="team-"),
    )


def window(scenario: Scenario, services: Sequence[str], from_s: float, to_s: float) -> Scenario:
    """The scenario's `services` from `from_s` to `to_s` only: a few hours around a
    change, to check it without simulating two weeks. The changes before `from_s`
    take effect at its start, in their order (an agent session that started before
    is left out); caches start cold, so leave an hour or two to warm them."""
    kept = [c for c in scenario.timeline if c.service in services and c.at_s < to_s]
    timeline = tuple(
        replace(c, at_s=max(0.0, c.at_s - from_s))
        for c in sorted(kept, key=lambda c: c.at_s)
        if c.at_s >= from_s or not isinstance(c.action, AgentSession)
    )
    return replace(
        scenario,
        services=tuple(s for s in scenario.services if s.name in services),
        duration_s=to_s - from_s,
        timeline=timeline,
        start=scenario.start + timedelta(seconds=from_s),
    )


def seasonal_world(
    seed: int,
    *,
    days: float = 14.0,
    scale: float = 1.0,
    start: datetime = DEFAULT_START,
) -> World:
    """The world of `seed` (timings, rates and magnitudes vary with it) over `days`
    (at least 14 for every regression to fall inside), starting `start` (a Monday
    00:00 UTC). `scale` multiplies every service's traffic."""
    from service.simulate import world_story

    rnd = random.Random(seed * 7_919 + 101)
    services = (
        assistant(rnd, scale),
        search_agent(rnd, scale),
        support_bot(rnd, scale),
        ticket_triage(rnd, scale),
        research_assistant(rnd, scale),
        code_review(rnd, scale),
        sql_copilot(rnd, scale),
        email_drafter(rnd, scale),
    )
    story = world_story.write(rnd, services, days * DAY_S)
    scenario = Scenario(
        name="seasonal-world",
        services=services,
        duration_s=days * DAY_S,
        timeline=story.timeline,
        start=start,
        seed=seed,
    )
    return World(scenario, story.expected(scenario), story.benign, seed)
