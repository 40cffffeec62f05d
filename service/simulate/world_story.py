"""The seasonal world's timeline (`world.seasonal_world`): real regressions at
seeded times with their ground truth, things that are not regressions, and a
decoy deploy a day on most services.

Steps are planned first and tagged afterwards, in time order: each service's
release tags then follow one another as a deploy tool would number them (a decoy
bumps the patch, a release the minor version; a rollback returns to the tag
before), whatever order the plan was written in.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from service.simulate.builders import Cause, ExpectedChange, Group
from service.simulate.scenario import (
    DAY_S,
    HOUR_S,
    Action,
    AgentSession,
    CacheTtl,
    CanonicalTools,
    Change,
    Deploy,
    DynamicSystemPrefix,
    HistoryRewrite,
    KvBudget,
    LengthDist,
    Routing,
    ScaleReplicas,
    Scenario,
    Service,
    ShuffledTools,
    StaticSystemPrefix,
)
from service.simulate.timefmt import TsFormatter
from service.simulate.world import Benign

MINUTE_S = 60.0
#: The services that get a decoy deploy every day.
DECOY_SERVICES = (
    "assistant",
    "search-agent",
    "support-bot",
    "ticket-triage",
    "code-review",
    "sql-copilot",
)
#: No decoy this close to a real change or a glitch of a service of the same model.
DECOY_GAP_S = 90 * MINUTE_S
ERODING_BLOCK = 256


@dataclass
class Step:
    """A planned timeline change; `tag` says how it is tagged ("minor", "patch": a
    new release; "previous": back to the tag before; "canary:<key>": the release
    of a staged rollout; None: untagged). `deploy` is filled in by `_tag`."""

    at_s: float
    service: str
    action: Action
    tag: str | None = None
    share: float | None = None
    scenario: str | None = None
    tenant: str | None = None
    post: bool | None = None
    description: str | None = None
    deploy: str | None = None

    def change(self) -> Change:
        return Change(
            self.at_s,
            self.service,
            self.action,
            deploy=self.deploy,
            post=self.post,
            description=self.description,
            scenario=self.scenario,
            share=self.share,
            tenant=self.tenant,
        )


@dataclass
class Truth:
    """One expected regression, opened by `step` (its tag is known once tagged)."""

    step: Step
    kind: str | None
    cause: Cause
    description: str
    until_s: float | None = None
    replicas: int | None = None
    group: Group | None = None
    service_level_ok: bool = False
    window_before_s: float = 1800.0
    window_after_s: float = 1800.0


@dataclass
class Story:
    """The plan: steps, the truths they open, the benign happenings."""

    services: dict[str, Service]
    duration_s: float
    steps: list[Step] = field(default_factory=list)
    truths: list[Truth] = field(default_factory=list)
    benign_list: list[Benign] = field(default_factory=list)
    quiet: list[tuple[str, float, float]] = field(default_factory=list)

    def add(self, *steps: Step) -> Step:
        """Plan the steps (the first opens what they do), with no decoy near them: a
        decoy beside a real change would make its attribution a coin toss."""
        self.steps.extend(steps)
        for step in steps:
            self.keep_quiet(step.service, step.at_s, step.at_s)
        return steps[0]

    def keep_quiet(self, service: str, from_s: float, to_s: float) -> None:
        """No decoy on a service of this one's model within DECOY_GAP_S of the span."""
        self.quiet.append((self.services[service].model, from_s - DECOY_GAP_S, to_s + DECOY_GAP_S))

    @property
    def timeline(self) -> tuple[Change, ...]:
        """The tagged steps as the scenario's changes."""
        return tuple(step.change() for step in self.steps)

    @property
    def benign(self) -> tuple[Benign, ...]:
        return tuple(sorted(self.benign_list, key=lambda b: b.at_s))

    def expected(self, scenario: Scenario) -> tuple[ExpectedChange, ...]:
        fmt = TsFormatter(scenario.start)
        within = [t for t in self.truths if t.step.at_s < scenario.duration_s]
        return tuple(
            _expected(t, self.services[t.step.service], fmt, scenario.duration_s)
            for t in sorted(within, key=lambda t: t.step.at_s)
        )


def _expected(truth: Truth, service: Service, fmt: TsFormatter, end_s: float) -> ExpectedChange:
    step = truth.step
    until = truth.until_s if truth.until_s is not None and truth.until_s < end_s else None
    return ExpectedChange(
        service=step.service,
        model=service.model,
        at_s=step.at_s,
        ts=fmt(step.at_s),
        effect="regression",
        kind=truth.kind,
        deploy=step.deploy if truth.kind == "deploy" else None,
        replicas=truth.replicas,
        cause=truth.cause,
        until_s=until,
        until_ts=None if until is None else fmt(until),
        description=truth.description.format(tag=step.deploy),
        group=truth.group,
        service_level_ok=truth.service_level_ok,
        window_before_s=truth.window_before_s,
        window_after_s=truth.window_after_s,
    )


def at(day: float, hour: float) -> float:
    """Seconds since the Monday 00:00 start."""
    return day * DAY_S + hour * HOUR_S


# -- real regressions ----------------------------------------------------------


def prefix_break(story: Story, rnd: random.Random) -> None:
    """(a) assistant: a release puts the time at the top of the system prompt in
    working hours; the next day's release fixes it."""
    t = at(rnd.choice([1, 2, 3, 8, 9]), rnd.uniform(9.5, 15.0))
    fix = t + rnd.uniform(20.0, 28.0) * HOUR_S
    step = story.add(Step(t, "assistant", DynamicSystemPrefix("time"), tag="minor"))
    story.add(Step(fix, "assistant", StaticSystemPrefix(), tag="patch"))
    story.truths.append(
        Truth(step, "deploy", "prefix_instability", "{tag}: the time at the top of the "
              "system prompt", until_s=fix)
    )  # fmt: skip


def staged_rollout(story: Story, rnd: random.Random) -> None:
    """(b) search-agent: a release that serializes the tools in a random order goes
    to 10%, 50%, then all of the requests over a few hours: two regressions, as the
    demo's canary has (docs/detection.md section 5). Its canary, found while it is
    small (the group of its tag, from its first request); and the whole service's,
    once the release serves most of it (at the 50% or the 100% stage, attributed to
    a stage's deploy event): a rollout to everyone despite a broken canary is a
    change of its own, with the whole service's cost."""
    t = at(rnd.choice([2, 9, 10]), rnd.uniform(9.0, 11.0))
    half = t + rnd.uniform(1.5, 2.5) * HOUR_S
    full = t + rnd.uniform(3.5, 4.5) * HOUR_S
    fix = full + rnd.uniform(22.0, 30.0) * HOUR_S
    key = "canary:search"
    step = story.add(Step(t, "search-agent", ShuffledTools(), tag=key, share=0.1))
    half_step = story.add(
        Step(half, "search-agent", Deploy(), tag=key, share=0.5),
        Step(full, "search-agent", Deploy(), tag=key, share=1.0),
    )
    story.add(Step(fix, "search-agent", CanonicalTools(), tag="patch"))
    story.keep_quiet("search-agent", t, full)
    story.truths += [
        Truth(
            step,
            "deploy",
            "prefix_instability",
            "{tag}: tools in a random order, to a 10% canary",
            until_s=fix,
            group=("deploy", "{tag}"),
        ),
        Truth(
            half_step,
            "deploy",
            "prefix_instability",
            "{tag}: tools in a random order, staged to 50% then 100% of the requests",
            until_s=fix,
            window_after_s=full - half + 1800.0,
        ),
    ]


def friday_rollback(story: Story, rnd: random.Random) -> None:
    """(c) ticket-triage, a Friday afternoon: a release puts a request id at the top
    of the `reply-draft` prompt (hit rate about 0.72 -> 0.50); rolled back to the
    previous tag 40 minutes later."""
    t = at(rnd.choice([4, 11]), rnd.uniform(13.0, 16.0))
    back = t + 40 * MINUTE_S
    step = story.add(
        Step(t, "ticket-triage", DynamicSystemPrefix("request"), tag="minor",
             scenario="reply-draft"),
        Step(back, "ticket-triage", StaticSystemPrefix(), tag="previous", scenario="reply-draft"),
    )  # fmt: skip
    story.keep_quiet("ticket-triage", t, back)
    story.truths.append(
        Truth(step, "deploy", "prefix_instability", "{tag}: a request id at the top of "
              "`reply-draft`, rolled back after 40 minutes", until_s=back)
    )  # fmt: skip


def tenant_break(story: Story, rnd: random.Random) -> None:
    """(d) support-bot: a mid-size customer's own integration starts sending a request
    id at the top of the system prompt (a posted config event says so); fixed by
    the customer a day or two later."""
    service = story.services["support-bot"]
    assert service.tenants is not None
    tenant = service.tenants.name(rnd.randint(6, 14))
    t = at(rnd.choice([3, 8, 10]), rnd.uniform(8.0, 18.0))
    fix = t + rnd.uniform(30.0, 54.0) * HOUR_S
    what = f"customer {tenant}'s integration sends a request id at the top of the system prompt"
    step = story.add(
        Step(t, "support-bot", DynamicSystemPrefix("request"), tenant=tenant, post=True,
             description=what),
    )  # fmt: skip
    story.add(
        Step(fix, "support-bot", StaticSystemPrefix(), tenant=tenant, post=True,
             description=f"customer {tenant}'s integration fixed: static system prompt again"),
    )  # fmt: skip
    story.truths.append(
        Truth(step, "config", "prefix_instability", what, until_s=fix, group=("tenant", tenant))
    )


def erosion(story: Story, rnd: random.Random) -> None:
    """(e) code-review: its KV budget shrinks 18-22% a day in small unposted steps
    (as a working set growing 22-28% a day against a fixed budget would) from its
    first week's headroom (world.KV_HEADROOM) on, so that it falls short of the
    weekday peak's working set on the morning of day 8: the regression's start
    (a smaller budget before has no effect). The peak's hit rate then slides from
    about 0.94 to about 0.5 by Friday (LRU loses the peak's history first; the
    nights and the weekend keep theirs longer): one regression, no event, cause
    `eviction`, whose change_ts may fall up to 1.5 days after its start."""
    from service.simulate.world import KV_FITS_PEAK_PER_RATE

    service = story.services["code-review"]
    assert service.kv_tokens is not None
    fits = service.peak_rate * KV_FITS_PEAK_PER_RATE
    crossing = at(8, rnd.uniform(6.0, 10.0))
    daily = rnd.uniform(0.78, 0.82)
    begin = crossing - math.log(service.kv_tokens / fits) / -math.log(daily) * DAY_S
    steps = []
    t = begin
    while t < story.duration_s:
        budget = service.kv_tokens * daily ** ((t - begin) / DAY_S)
        tokens = int(budget) // ERODING_BLOCK * ERODING_BLOCK
        steps.append(Step(t, "code-review", KvBudget(tokens), post=False))
        t += 30 * MINUTE_S
    story.steps.extend(steps)
    first_short = next((s for s in steps if s.at_s >= crossing), None)
    if first_short is None:
        return
    story.keep_quiet("code-review", first_short.at_s, first_short.at_s)
    story.truths.append(
        Truth(
            first_short,
            None,
            "eviction",
            f"KV working set outgrows its budget (+{1 / daily - 1:.0%} a day), no event",
            window_after_s=1.5 * DAY_S,
        )
    )


def ttl_release(story: Story, rnd: random.Random) -> None:
    """(f) research-assistant: a release asks for the default 5-minute cache TTL
    instead of the hour, on users who pause about ten minutes; fixed later."""
    t = at(rnd.choice([1, 3, 9]), rnd.uniform(10.0, 14.0))
    fix = t + rnd.uniform(24.0, 48.0) * HOUR_S
    step = story.add(
        Step(t, "research-assistant", CacheTtl("5m"), tag="minor",
             description="use the default 5-minute prompt cache TTL (cheaper cache writes)"),
    )  # fmt: skip
    story.add(
        Step(fix, "research-assistant", CacheTtl("1h"), tag="patch",
             description="ask for the 1-hour prompt cache TTL again"),
    )  # fmt: skip
    story.truths.append(
        Truth(step, "deploy", "expiry", "{tag}: cache TTL 1 h -> 5 min", until_s=fix)
    )


def sql_changes(story: Story, rnd: random.Random) -> None:
    """(g) sql-copilot: a scale-out to 4 round-robin replicas seen only in the records
    (cause `routing`, its inferred `replicas` event), fixed by prefix affinity hours
    later; two days later a KV budget cut (posted config, `eviction`), restored."""
    day = rnd.choice([1, 2, 8])
    t = at(day, rnd.uniform(10.0, 14.0))
    fix = t + rnd.uniform(4.0, 8.0) * HOUR_S
    step = story.add(Step(t, "sql-copilot", ScaleReplicas(4, "round_robin"), post=False))
    story.add(Step(fix, "sql-copilot", Routing("prefix_affinity")))
    story.truths.append(
        Truth(step, "replicas", "routing", "replicas 1 -> 4, round robin (records only)",
              until_s=fix, replicas=4)
    )  # fmt: skip
    service = story.services["sql-copilot"]
    cut_at = at(day + 2, rnd.uniform(10.0, 15.0))
    restore = cut_at + rnd.uniform(3.0, 6.0) * HOUR_S
    cut = story.add(Step(cut_at, "sql-copilot", KvBudget(sql_cut_tokens(service))))
    story.add(Step(restore, "sql-copilot", KvBudget(service.kv_tokens)))
    story.truths.append(Truth(cut, "config", "eviction", "KV budget cut", until_s=restore))


def sql_cut_tokens(service: Service) -> int:
    """A KV budget per replica (of 4, with affinity) that holds a fraction of
    sql-copilot's working set at the weekday peak."""
    return int(service.peak_rate * 80_000) // ERODING_BLOCK * ERODING_BLOCK


# -- not regressions -------------------------------------------------------------


def _calm_day(story: Story, rnd: random.Random, service: str) -> int:
    """A weekday on which the service has no real change (nor its fix)."""
    busy = {int(s.at_s // DAY_S) for s in story.steps if s.service == service}
    days = [d for d in (1, 2, 3, 4, 8, 9, 10, 11) if d not in busy]
    return rnd.choice(days or [0])


def glitches(story: Story, rnd: random.Random) -> None:
    """A 5-minute prompt break on the assistant (a release rolled back after 5
    minutes) and a 5-minute KV budget cut on sql-copilot: neither is a regression."""
    t = at(_calm_day(story, rnd, "assistant"), rnd.uniform(10.0, 16.0))
    story.add(
        Step(t, "assistant", DynamicSystemPrefix("time"), tag="patch"),
        Step(t + 5 * MINUTE_S, "assistant", StaticSystemPrefix(), tag="previous"),
    )
    story.keep_quiet("assistant", t, t + 5 * MINUTE_S)
    story.benign_list.append(
        Benign("assistant", t, t + 5 * MINUTE_S, "glitch", "prompt break rolled back after 5 min")
    )
    service = story.services["sql-copilot"]
    t = at(_calm_day(story, rnd, "sql-copilot"), rnd.uniform(10.0, 16.0))
    story.add(
        Step(t, "sql-copilot", KvBudget(sql_cut_tokens(service) // 2)),
        Step(t + 5 * MINUTE_S, "sql-copilot", KvBudget(service.kv_tokens)),
    )
    story.benign_list.append(
        Benign("sql-copilot", t, t + 5 * MINUTE_S, "glitch", "KV budget cut for 5 min")
    )


def sunday_session(story: Story, rnd: random.Random) -> None:
    """One long agent session (its history summarized on every turn, a request of
    5,000-6,000 tokens every minute and a half) holds about 80% of email-drafter's tokens for
    15-30 minutes of a quiet Sunday morning."""
    t = at(rnd.choice([6, 13]), rnd.uniform(7.5, 10.0))
    minutes = rnd.uniform(15.0, 30.0)
    tenants = story.services["email-drafter"].tenants
    think = 90.0
    agent = AgentSession(
        turns=max(2, round(minutes * MINUTE_S / (think + 7.0))),
        query=LengthDist(150, 0.5, 10, 2_000),
        tool_result=LengthDist(800, 0.4, 100, 6_000),
        reply=LengthDist(300, 0.4, 20, 2_000),
        think_time_s=LengthDist(think, 0.3, 20, 240),
        rewrite=HistoryRewrite(0.5),
        tenant=None if tenants is None else tenants.name(rnd.randint(1, 3)),
    )
    story.add(Step(t, "email-drafter", agent, post=False))
    story.benign_list.append(
        Benign("email-drafter", t, t + minutes * MINUTE_S, "agent-session",
               f"one agent session of {agent.turns} turns rewriting its history")
    )  # fmt: skip


def decoys(story: Story, rnd: random.Random) -> None:
    """A release that changes nothing, every day on most services, at any hour from
    8:00 to 23:00 (away from the real changes of the same model)."""
    days = int(story.duration_s // DAY_S + 0.999)
    for day in range(days):
        for name in DECOY_SERVICES:
            model = story.services[name].model
            for _ in range(20):
                t = at(day, rnd.uniform(8.0, 23.0))
                if t < story.duration_s and not any(
                    m == model and lo <= t <= hi for m, lo, hi in story.quiet
                ):
                    story.steps.append(Step(t, name, Deploy(), tag="patch"))
                    story.benign_list.append(Benign(name, t, t, "decoy", "release, no change"))
                    break


# -- tagging and assembly --------------------------------------------------------


def _version(tag: str) -> tuple[int, int, int]:
    major, minor, patch = (int(p) for p in tag.lstrip("v").split("."))
    return major, minor, patch


def _tag(steps: list[Step], services: dict[str, Service]) -> None:
    """Give each tagged step its deploy tag, in time order (module docstring)."""
    stable: dict[str, list[str]] = {n: [s.deploy or "v1.0.0"] for n, s in services.items()}
    highest = {n: _version(tags[0]) for n, tags in stable.items()}
    canaries: dict[str, str] = {}
    for step in sorted(steps, key=lambda s: s.at_s):
        name, kind = step.service, step.tag
        if kind is None:
            continue
        major, minor, patch = highest[name]
        if kind == "previous":
            step.deploy = stable[name][-2]
            stable[name].append(step.deploy)
            continue
        if kind in canaries:  # a later stage of a staged rollout
            step.deploy = canaries[kind]
        else:
            bump = (major, minor, patch + 1) if kind == "patch" else (major, minor + 1, 0)
            highest[name] = bump
            step.deploy = "v{}.{}.{}".format(*bump)
            if kind.startswith("canary:"):
                canaries[kind] = step.deploy
        if step.share is None or step.share >= 1.0:
            stable[name].append(step.deploy)


def write(rnd: random.Random, services: Sequence[Service], duration_s: float) -> Story:
    """The timeline of one seed (seconds from a Monday 00:00): every real regression,
    the glitches, the Sunday session, then the decoys around them; tagged, in time
    order."""
    story = Story({s.name: s for s in services}, duration_s)
    prefix_break(story, rnd)
    staged_rollout(story, rnd)
    friday_rollback(story, rnd)
    tenant_break(story, rnd)
    erosion(story, rnd)
    ttl_release(story, rnd)
    sql_changes(story, rnd)
    glitches(story, rnd)
    sunday_session(story, rnd)
    decoys(story, rnd)
    story.steps.sort(key=lambda s: s.at_s)
    _tag(story.steps, story.services)
    for truth in story.truths:
        if truth.group is not None:
            truth.group = (truth.group[0], truth.group[1].format(tag=truth.step.deploy))
    return story
