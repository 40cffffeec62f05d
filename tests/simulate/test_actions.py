"""Each timeline action has its effect on the hit rate, and nothing else does.

Hit rate = sum cached_tokens / sum prompt_tokens over whole 5-minute buckets,
in a steady flat-traffic service: 1.5 h before the change against the time
from 10 minutes after it to the end."""

from dataclasses import dataclass, replace

import pytest

from service.simulate import (
    Action,
    AppendOnlyHistory,
    CanonicalTools,
    Change,
    DailyCurve,
    Deploy,
    DynamicSystemPrefix,
    Fanout,
    HistoryRewrite,
    KvBudget,
    LengthDist,
    PromptStructure,
    Routing,
    ScaleReplicas,
    Scenario,
    Service,
    ShuffledTools,
    StaticSystemPrefix,
    TrafficMultiplier,
    iter_records,
)
from tests.simulate.analysis import bucket_hit_rates

HOUR = 3600.0
CHANGE_AT = 2.0 * HOUR
END = 4.0 * HOUR

SERVICE = Service(
    name="svc",
    model="m",
    prompt=PromptStructure(
        system_tokens=1000,
        tool_tokens=(60,) * 14,
        query=LengthDist(150, 0.6, 5, 4000),
        tool_result=LengthDist(1000, 0.7, 20, 8000),
        reply=LengthDist(350, 0.5, 10, 4000),
        turns_mean=6.5,
        max_turns=30,
        think_time_s=LengthDist(40, 0.8, 3, 1800),
    ),
    peak_rate=2.0,
    curve=DailyCurve.flat(),
    replicas=1,
    routing="round_robin",
    kv_tokens=4_194_304,  # about twice the working set at twice the traffic
    block_size=256,
)
FOUR_AFFINITY = {"replicas": 4, "routing": "prefix_affinity"}


@dataclass(frozen=True)
class Case:
    name: str
    actions: tuple[tuple[float, Action], ...]
    effect: str  # "drop", "none" or "recover" (back to the level before the first action)
    service: tuple[tuple[str, object], ...] = ()


CASES = [
    Case("nothing", (), "none"),
    Case("deploy", ((CHANGE_AT, Deploy()),), "none"),
    Case("dynamic_system_prefix", ((CHANGE_AT, DynamicSystemPrefix("time")),), "drop"),
    Case(
        "static_system_prefix",
        ((1.0 * HOUR, DynamicSystemPrefix("time")), (CHANGE_AT, StaticSystemPrefix())),
        "recover",
    ),
    Case("shuffled_tools", ((CHANGE_AT, ShuffledTools()),), "drop"),
    Case(
        "canonical_tools", ((1.0 * HOUR, ShuffledTools()), (CHANGE_AT, CanonicalTools())), "recover"
    ),
    Case("history_rewrite", ((CHANGE_AT, HistoryRewrite(0.5)),), "drop"),
    Case(
        "append_only_history",
        ((1.0 * HOUR, HistoryRewrite(0.5)), (CHANGE_AT, AppendOnlyHistory())),
        "recover",
    ),
    Case("scale_replicas_round_robin", ((CHANGE_AT, ScaleReplicas(4, "round_robin")),), "drop"),
    Case("scale_replicas_affinity", ((CHANGE_AT, ScaleReplicas(4, "prefix_affinity")),), "none"),
    Case(
        "routing_round_robin",
        ((CHANGE_AT, Routing("round_robin")),),
        "drop",
        tuple(FOUR_AFFINITY.items()),
    ),
    Case(
        "routing_least_loaded",
        ((CHANGE_AT, Routing("least_loaded")),),
        "drop",
        tuple(FOUR_AFFINITY.items()),
    ),
    Case(
        "routing_back_to_affinity",
        ((1.0 * HOUR, Routing("round_robin")), (CHANGE_AT, Routing("prefix_affinity"))),
        "recover",
        tuple(FOUR_AFFINITY.items()),
    ),
    Case("kv_budget_cut", ((CHANGE_AT, KvBudget(10_240)),), "drop"),
    Case("kv_budget_raise", ((CHANGE_AT, KvBudget(None)),), "none"),
    Case("fanout", ((CHANGE_AT, Fanout(k=10, context_tokens=4000, share=0.22)),), "drop"),
    Case(
        "fanout_off",
        ((1.0 * HOUR, Fanout(k=10, context_tokens=4000, share=0.22)), (CHANGE_AT, Fanout(k=0))),
        "recover",
    ),
    Case("traffic_multiplier", ((CHANGE_AT, TrafficMultiplier(2.0)),), "none"),
]


def hit_rates(case: Case, seed: int = 11) -> tuple[float, float, float]:
    """(hit rate in the first hour's steady part, just before CHANGE_AT, after it)."""
    service = replace(SERVICE, **dict(case.service))  # type: ignore[arg-type]
    timeline = tuple(Change(at, "svc", action) for at, action in case.actions)
    scenario = Scenario(case.name, (service,), END, timeline, seed=seed)
    buckets = bucket_hit_rates(iter_records(scenario), 300, scenario.start)
    baseline = buckets.window(0.4 * HOUR, 1.0 * HOUR)
    before = buckets.window(CHANGE_AT - 0.9 * HOUR, CHANGE_AT)
    after = buckets.window(CHANGE_AT + 600, END)
    return baseline, before, after


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_action_effect_on_hit_rate(case: Case) -> None:
    baseline, before, after = hit_rates(case)
    assert 0.75 < baseline < 0.95, "the healthy service caches most of its prompts"
    if case.effect == "drop":
        assert before - after >= 0.10, (before, after)
        assert (before - after) / before >= 0.20, (before, after)
    elif case.effect == "none":
        assert abs(after - before) < 0.03, (before, after)
    else:
        assert before < baseline - 0.10, "the problem before the fix was real"
        assert after > baseline - 0.03, (baseline, before, after)


def test_a_drop_lasts_in_every_bucket() -> None:
    """Not an average of a few bad buckets: every 5-minute bucket after the
    change is below every-but-a-few buckets before it."""
    service = SERVICE
    scenario = Scenario(
        "last", (service,), END, (Change(CHANGE_AT, "svc", ScaleReplicas(4, "round_robin")),)
    )
    buckets = bucket_hit_rates(iter_records(scenario), 300, scenario.start)
    before = buckets.rates(CHANGE_AT - HOUR, CHANGE_AT)
    after = buckets.rates(CHANGE_AT + 600, END)
    assert after.max() < before.min()


def test_user_name_at_the_top_makes_the_first_block_per_user() -> None:
    scenario = Scenario(
        "user",
        (replace(SERVICE, users=50),),
        1.0 * HOUR,
        (Change(0.5 * HOUR, "svc", DynamicSystemPrefix("user")),),
    )
    first_blocks: dict[bool, set[int]] = {False: set(), True: set()}
    for record in iter_records(scenario):
        after = record["ts"] >= "2025-03-03T00:30"
        first_blocks[after].add(record["block_hashes"][0])
    assert len(first_blocks[False]) == 1
    assert 40 <= len(first_blocks[True]) <= 50
