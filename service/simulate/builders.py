"""Ready-made scenarios: a healthy corporate assistant week, the detection week
with injected regressions and the expected findings to score a detector, and a
managed-API story (a release that shortens the cache TTL)."""

from __future__ import annotations

import random
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Literal

from service.simulate.scenario import (
    DAY_S,
    DEFAULT_START,
    AppendOnlyHistory,
    CacheTtl,
    CanonicalTools,
    Change,
    DailyCurve,
    Deploy,
    DynamicSystemPrefix,
    Fanout,
    HistoryRewrite,
    KvBudget,
    LengthDist,
    ManagedProvider,
    PromptStructure,
    Routing,
    RoutingPolicy,
    ScaleReplicas,
    Scenario,
    Service,
    ShuffledTools,
    StaticSystemPrefix,
    TrafficMultiplier,
)
from service.simulate.timefmt import TsFormatter

PrefixProblem = Literal["dynamic_system_prefix", "shuffled_tools", "history_rewrite"]
Cause = Literal[
    "prefix_instability",
    "history_rewrite",
    "routing",
    "eviction",
    "expiry",
    "below_minimum",
    "cold_fanout",
    "unknown",
]
#: A regression's `group` (contract section 5): (by, value); None is the whole service.
Group = tuple[str, str]
Effect = Literal["regression", "none", "recovery"]
PROBLEMS = ("noop_deploy", "prefix", "scale", "kv_budget", "fanout", "traffic")


def corporate_assistant_week(
    seed: int = 0,
    *,
    days: float = 7.0,
    peak_rate: float = 2.5,
    users: int = 5_000,
    replicas: int = 2,
    routing: RoutingPolicy = "prefix_affinity",
    kv_tokens: int | None = 2_097_152,
    block_size: int = 256,
    timeline: Sequence[Change] = (),
    start: datetime = DEFAULT_START,
) -> Scenario:
    """An internal assistant: a long system prompt and 14 tools, a per-user
    context, multi-turn sessions, busy working hours, quiet nights and weekends."""
    rnd = random.Random(seed)
    prompt = PromptStructure(
        system_tokens=rnd.randint(5_000, 7_000),
        tool_tokens=tuple(rnd.randint(80, 260) for _ in range(14)),
        response_format_tokens=0,
        user_context_tokens=300,
        query=LengthDist(90, 0.7, 5, 4_000),
        reply=LengthDist(350, 0.6, 10, 4_000),
        turns_mean=5.0,
        think_time_s=LengthDist(60, 0.9, 5, 3_600),
    )
    service = Service(
        name="corporate-assistant",
        model="acme-chat-70b",
        prompt=prompt,
        peak_rate=peak_rate,
        curve=DailyCurve(night=0.05, start_hour=7.5, end_hour=19.5, weekend=0.25),
        users=users,
        replicas=replicas,
        routing=routing,
        kv_tokens=kv_tokens,
        block_size=block_size,
        cache_key="user",
        deploy="v3.4.0",
    )
    return Scenario(
        name="corporate-assistant",
        services=(service,),
        duration_s=days * DAY_S,
        timeline=tuple(timeline),
        start=start,
        seed=seed,
    )


def ttl_release_story(
    release_at_s: float,
    fix_at_s: float | None = None,
    *,
    name: str = "research-assistant",
    model: str = "claude-sonnet-4-5",
    peak_rate: float = 0.06,
    deploys: tuple[str, str, str] = ("v6.4.0", "v7.0.0", "v7.0.1"),
) -> tuple[Service, tuple[Change, ...]]:
    """A research assistant on Anthropic's API, and a release that sets its cache
    TTL to 5 minutes on traffic whose users pause about ten minutes between turns.

    Its users read long answers over retrieved documents: a 3,900-token shared
    start (system prompt and tools), turns of about ten minutes apart (think time
    600 s, rarely under 5 minutes). Its callers ask for `"ttl": "1h"`, so every
    turn reads its whole history from the cache. Release `deploys[1]`, at
    `release_at_s`, drops to the default 5 minutes (a 5-minute write costs 1.25x
    the input price, a 1-hour one 2x): from the second turn after it, each
    continuing turn finds its history expired and writes it again; only the
    shared start, kept warm by the other sessions, is still read. The hit rate
    falls from about 85% to under 40% while the cacheable fraction (reuse within
    the hour) stays: cause `expiry`. `deploys[2]`, at `fix_at_s` (None: never),
    asks for the hour again. Returns the service (tagged `deploys[0]`) and its
    timeline; place both in a scenario.
    """
    prompt = PromptStructure(
        system_tokens=3_000,
        tool_tokens=(180, 140, 160, 120, 150, 150),
        query=LengthDist(150, 0.6, 5, 2_000),
        tool_result=LengthDist(1_500, 0.6, 100, 8_000),
        reply=LengthDist(500, 0.5, 20, 4_000),
        turns_mean=5.0,
        max_turns=20,
        think_time_s=LengthDist(600, 0.2, 120, 2_400),
    )
    service = Service(
        name=name,
        model=model,
        prompt=prompt,
        peak_rate=peak_rate,
        curve=DailyCurve(night=0.08),
        users=2_000,
        block_size=256,
        cache_key=None,
        deploy=deploys[0],
        managed=ManagedProvider("anthropic", ttl="1h", min_prompt_tokens=1_024),
    )
    timeline = [
        Change(
            release_at_s,
            name,
            CacheTtl("5m"),
            deploy=deploys[1],
            description="use the default 5-minute prompt cache TTL (cheaper cache writes)",
        )
    ]
    if fix_at_s is not None:
        timeline.append(
            Change(
                fix_at_s,
                name,
                CacheTtl("1h"),
                deploy=deploys[2],
                description="ask for the 1-hour prompt cache TTL again",
            )
        )
    return service, tuple(timeline)


@dataclass(frozen=True)
class ExpectedChange:
    """What a detector should report around one timeline change.

    `effect`: "regression" (a lasting hit-rate drop), "recovery" (a fix: the
    rate comes back) or "none". For a regression, `kind`/`deploy`/`replicas`
    describe the event it should be attributed to (`replicas` events are
    inferred from the records, the others are posted; kind None: no event, so
    only a regression attributed to none is attributed right) and `cause` the
    contract's cause; `until_s` is when it is fixed (None: never).

    `group`: the regression's group (None: the whole service); with
    `service_level_ok` a report of the whole service is as good (a canary whose
    release then reaches all the traffic). A found `change_ts` matches from
    `window_before_s` before `ts` to `window_after_s` after it (a staged
    rollout's, or a slow erosion's, change shows up anywhere in a longer span).
    `report_by_s`: when set, the regression must be first reported by then
    (seconds since the scenario's start; None: no deadline is checked).
    """

    service: str
    model: str
    at_s: float
    ts: str
    effect: Effect
    kind: str | None
    deploy: str | None
    replicas: int | None
    cause: Cause | None
    until_s: float | None
    until_ts: str | None
    description: str
    group: Group | None = None
    service_level_ok: bool = False
    window_before_s: float = 1800.0
    window_after_s: float = 1800.0
    report_by_s: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DetectionWeek:
    scenario: Scenario
    changes: tuple[ExpectedChange, ...]

    @property
    def regressions(self) -> list[ExpectedChange]:
        return [c for c in self.changes if c.effect == "regression"]

    @property
    def benign(self) -> list[ExpectedChange]:
        return [c for c in self.changes if c.effect == "none"]


def detection_week(
    seed: int = 0,
    *,
    days: float = 7.0,
    prefix_problem: PrefixProblem = "dynamic_system_prefix",
    problems: Collection[str] = PROBLEMS,
    peak_rate: float | None = None,
    scale_to: int = 4,
    fanout_k: int = 10,
    traffic_factor: float = 2.0,
    recover_after: float | None = 0.45,
    block_size: int = 256,
    start: datetime = DEFAULT_START,
) -> DetectionWeek:
    """One service over `days` (7: one change a day, each a day after the
    previous, at working hours) with, in order: a deploy that changes nothing;
    a deploy with a prefix problem (`prefix_problem`) and its fix one slot
    later; a scale-up from 1 to `scale_to` replicas with round-robin (records
    only, no event); a KV budget cut (a posted config event); a release that
    fans out `fanout_k` parallel calls on a cold shared context; a traffic
    multiplication by `traffic_factor`. Nights are quiet throughout.

    Problems other than the prefix one are fixed `recover_after` slots later
    (routing back to prefix affinity, budget restored, fan-out rolled back) so
    that each drop is measured against a healthy baseline; None keeps them.
    `problems` selects the slots in use (others stay empty). Timings, rates
    and magnitudes vary with the seed.
    """
    rnd = random.Random(seed * 7919 + 17)
    slot_s = days / 7.0 * DAY_S
    # Slot k at about 9:00 + k hours on day k: gaps stay >= one slot.
    slots = [slot_s * (k + 0.375 + 0.04 * k + rnd.uniform(0.0, 0.03)) for k in range(7)]
    name, model = "assistant", "acme-70b-instruct"
    prompt = PromptStructure(
        system_tokens=rnd.randint(900, 1_300),
        tool_tokens=tuple(rnd.randint(40, 80) for _ in range(14)),
        query=LengthDist(rnd.uniform(120, 180), 0.6, 5, 4_000),
        tool_result=LengthDist(rnd.uniform(900, 1_200), 0.7, 20, 8_000),
        reply=LengthDist(rnd.uniform(300, 400), 0.5, 10, 4_000),
        turns_mean=rnd.uniform(6.0, 7.5),
        max_turns=30,
        think_time_s=LengthDist(rnd.uniform(35, 55), 0.8, 3, 1_800),
    )
    baseline_kv = 4_194_304  # twice the working set at twice the traffic
    cut_kv = (prompt.static_tokens + rnd.randint(6_000, 9_000)) // block_size * block_size
    service = Service(
        name=name,
        model=model,
        prompt=prompt,
        peak_rate=peak_rate if peak_rate is not None else rnd.uniform(1.5, 2.0),
        curve=DailyCurve(night=rnd.uniform(0.05, 0.1)),
        users=3_000,
        replicas=1,
        routing="round_robin",
        kv_tokens=baseline_kv,
        block_size=block_size,
        cache_key="session",
        deploy="v1.0.0",
    )
    fanout = Fanout(
        k=fanout_k,
        context_tokens=rnd.randint(3_500, 4_500),
        share=rnd.uniform(0.2, 0.25),
        spread_ms=5.0,
    )
    fix = None if recover_after is None else recover_after * slot_s
    timeline: list[Change] = []
    expected: list[tuple[Change, Effect, str | None, int | None, Cause | None, float | None]] = []

    def add(
        change: Change,
        effect: Effect | None = None,
        kind: str | None = None,
        replicas: int | None = None,
        cause: Cause | None = None,
        until: float | None = None,
    ) -> None:
        timeline.append(change)
        if effect is not None:
            expected.append((change, effect, kind, replicas, cause, until))

    def recovery(at: float, action: Any, deploy: str | None = None) -> None:
        add(Change(at, name, action, deploy=deploy), "recovery", "deploy" if deploy else "config")

    if "noop_deploy" in problems:
        add(Change(slots[0], name, Deploy(), deploy="v1.1.0"), "none", "deploy")
    if "prefix" in problems:
        problem: Any
        fixing: Any
        cause: Cause = "prefix_instability"
        if prefix_problem == "dynamic_system_prefix":
            problem, fixing = DynamicSystemPrefix("time"), StaticSystemPrefix()
        elif prefix_problem == "shuffled_tools":
            problem, fixing = ShuffledTools(), CanonicalTools()
        else:
            problem = HistoryRewrite(rnd.uniform(0.4, 0.6))
            fixing, cause = AppendOnlyHistory(), "history_rewrite"
        add(
            Change(slots[1], name, problem, deploy="v1.2.0"),
            "regression",
            "deploy",
            None,
            cause,
            slots[2],
        )
        recovery(slots[2], fixing, "v1.2.1")
    if "scale" in problems:
        add(
            Change(slots[3], name, ScaleReplicas(scale_to, "round_robin")),
            "regression", "replicas", scale_to, "routing",
            None if fix is None else slots[3] + fix,
        )  # fmt: skip
        if fix is not None:
            recovery(slots[3] + fix, Routing("prefix_affinity"))
    if "kv_budget" in problems:
        add(
            Change(slots[4], name, KvBudget(cut_kv)),
            "regression", "config", None, "eviction",
            None if fix is None else slots[4] + fix,
        )  # fmt: skip
        if fix is not None:
            recovery(slots[4] + fix, KvBudget(baseline_kv))
    if "fanout" in problems:
        add(
            Change(slots[5], name, fanout, deploy="v1.3.0"),
            "regression", "deploy", None, "cold_fanout",
            None if fix is None else slots[5] + fix,
        )  # fmt: skip
        if fix is not None:
            recovery(slots[5] + fix, Fanout(k=0), "v1.3.1")
    if "traffic" in problems:
        add(Change(slots[6], name, TrafficMultiplier(traffic_factor)), "none", None)

    scenario = Scenario(
        name="detection-week",
        services=(service,),
        duration_s=days * DAY_S,
        timeline=tuple(timeline),
        start=start,
        seed=seed,
    )
    from service.simulate.events import walk_timeline

    truth = {id(change): text for change, text in walk_timeline(scenario)}
    fmt = TsFormatter(start)
    changes = tuple(
        ExpectedChange(
            service=name,
            model=model,
            at_s=change.at_s,
            ts=fmt(change.at_s),
            effect=effect,
            kind=kind,
            deploy=change.deploy,
            replicas=replicas,
            cause=cause,
            until_s=until,
            until_ts=None if until is None else fmt(until),
            description=truth[id(change)],
        )
        for change, effect, kind, replicas, cause, until in expected
    )
    return DetectionWeek(scenario, changes)
