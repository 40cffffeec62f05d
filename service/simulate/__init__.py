"""Traffic simulator: replicas with LRU block caches, routing, in-flight
prefill and TTFT, or a managed API's prompt cache (TTL, minimum, writes),
driven by a scenario or a Mooncake trace; emits contract usage records and
change events.

    from service.simulate import detection_week, simulate
    week = detection_week(seed=3)
    result = simulate(week.scenario)      # result.records, result.events
    week.regressions                      # what a detector should find

    world = seasonal_world(seed=3)        # two weeks, eight services, seasons
    world.expected                        # its real regressions (ground truth)
"""

from service.simulate.builders import (
    DetectionWeek,
    ExpectedChange,
    corporate_assistant_week,
    detection_week,
    ttl_release_story,
)
from service.simulate.cache import ReplicaCache, ReplicaPool
from service.simulate.engine import Engine, SimulationResult, iter_records, simulate, token_counts
from service.simulate.events import scenario_events
from service.simulate.managed import PromptCache
from service.simulate.mooncake import iter_mooncake, read_mooncake
from service.simulate.output import (
    PostError,
    PostStats,
    post_events,
    post_records,
    write_events,
    write_ndjson,
)
from service.simulate.scenario import (
    Action,
    AgentSession,
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
    LatencyModel,
    LengthDist,
    ManagedProvider,
    PromptStructure,
    Rendering,
    Routing,
    ScaleReplicas,
    Scenario,
    Service,
    ShuffledTools,
    StaticSystemPrefix,
    Tenants,
    TrafficMultiplier,
)
from service.simulate.world import Benign, World, seasonal_world

__all__ = [
    "Action",
    "AgentSession",
    "AppendOnlyHistory",
    "Benign",
    "CacheTtl",
    "CanonicalTools",
    "Change",
    "DailyCurve",
    "Deploy",
    "DetectionWeek",
    "DynamicSystemPrefix",
    "Engine",
    "ExpectedChange",
    "Fanout",
    "HistoryRewrite",
    "KvBudget",
    "LatencyModel",
    "LengthDist",
    "ManagedProvider",
    "PostError",
    "PostStats",
    "PromptCache",
    "PromptStructure",
    "Rendering",
    "ReplicaCache",
    "ReplicaPool",
    "Routing",
    "ScaleReplicas",
    "Scenario",
    "Service",
    "ShuffledTools",
    "SimulationResult",
    "StaticSystemPrefix",
    "Tenants",
    "TrafficMultiplier",
    "World",
    "corporate_assistant_week",
    "detection_week",
    "iter_mooncake",
    "iter_records",
    "post_events",
    "post_records",
    "read_mooncake",
    "scenario_events",
    "seasonal_world",
    "simulate",
    "token_counts",
    "ttl_release_story",
    "write_events",
    "write_ndjson",
]
