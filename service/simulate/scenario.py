"""Dataclasses describing a simulated scenario: services, prompt structure,
traffic, latency and a timeline of changes.

Everything here is plain frozen data; `engine.py` interprets it. Times on the
timeline are seconds since `Scenario.start`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

RoutingPolicy = Literal["round_robin", "prefix_affinity", "least_loaded"]
ROUTING_POLICIES: tuple[RoutingPolicy, ...] = ("round_robin", "prefix_affinity", "least_loaded")
CacheKeyMode = Literal["session", "user"]
SegmentName = Literal["system", "tools", "response_format"]
HashFormat = Literal["int", "hex"]
#: The cache lifetimes Anthropic's `cache_control` accepts, and their seconds.
CacheTtlChoice = Literal["5m", "1h"]
CACHE_TTL_S: dict[CacheTtlChoice, float] = {"5m": 300.0, "1h": 3600.0}
#: Anthropic's lifetime for a `cache_control` that names none.
DEFAULT_CACHE_TTL: CacheTtlChoice = "5m"

DAY_S = 86_400.0
HOUR_S = 3_600.0
DEFAULT_START = datetime(2025, 3, 3, tzinfo=UTC)  # a Monday, 00:00 UTC


@dataclass(frozen=True)
class LengthDist:
    """A token count: lognormal with the given mean, clipped to [low, high]."""

    mean: float
    sigma: float = 0.5
    low: int = 1
    high: int = 1_000_000

    @property
    def mu(self) -> float:
        # Chosen so that the unclipped lognormal has exactly `mean` as its mean.
        return math.log(max(self.mean, 1e-9)) - self.sigma * self.sigma / 2


@dataclass(frozen=True)
class DailyCurve:
    """Relative traffic by time of day: `night` outside working hours, rising as
    sin^shape to 1.0 midway between `start_hour` and `end_hour`. Weekends
    (days 5 and 6 counted from a Monday start) are scaled by `weekend`."""

    night: float = 0.08
    start_hour: float = 7.0
    end_hour: float = 21.0
    shape: float = 1.5
    weekend: float = 1.0
    utc_offset_hours: float = 0.0

    @staticmethod
    def flat() -> DailyCurve:
        return DailyCurve(night=1.0, weekend=1.0)


@dataclass(frozen=True)
class LatencyModel:
    """TTFT = (base + per uncached token + per cached token) * lognormal jitter;
    latency = TTFT + completion tokens * per output token. No queueing."""

    base_ms: float = 120.0
    per_uncached_token_ms: float = 0.05
    per_cached_token_ms: float = 0.002
    per_output_token_ms: float = 20.0
    jitter_sigma: float = 0.1


@dataclass(frozen=True)
class PromptStructure:
    """How one service builds its prompts. The static start is made of the
    segments in `order` (zero-token ones are left out); then an optional
    per-user context; then the session history (each turn appends its query,
    the tool results gathered while answering, if any, and the assistant's
    reply); then the current query."""

    system_tokens: int = 1500
    tool_tokens: tuple[int, ...] = ()
    response_format_tokens: int = 0
    order: tuple[SegmentName, ...] = ("system", "tools", "response_format")
    user_context_tokens: int = 0
    query: LengthDist = LengthDist(120, 0.6, 5, 4000)
    reply: LengthDist = LengthDist(300, 0.5, 5, 4000)
    tool_result: LengthDist | None = None
    turns_mean: float = 6.0
    max_turns: int = 40
    think_time_s: LengthDist = LengthDist(45, 0.8, 3, 1800)

    @property
    def static_tokens(self) -> int:
        return self.system_tokens + sum(self.tool_tokens) + self.response_format_tokens


@dataclass(frozen=True)
class Rendering:
    """One `scenario` of a service's traffic (contract section 1's record field).
    Each session takes one, drawn by `share` (the shares of a service's renderings
    are relative weights of its sessions).

    Without `prompt`, a rendering of the service's own prompt: a web chat and an API
    client that build the same system prompt with one and two trailing newlines. Its
    system prompt is its own text, `system_extra_tokens` longer than the service's
    `system_tokens`: its `system` segment has a `hash` of its own, and so do the
    block hashes from the system prompt on (the cache holds one copy of the start
    per rendering), while its `norm_hash`, the hash of the text as normalized, is the
    service's one.

    With `prompt`, a scenario with a prompt of its own (a `ticket-summary` beside the
    chat): its own system prompt, tools and response format (its segments' hashes
    and norm hashes are its own, shared with no other scenario) and its own turns,
    lengths and think times. The service's session rate is set so that `peak_rate`
    stays the user turns per second of all its scenarios together."""

    scenario: str
    share: float
    system_extra_tokens: int = 0
    prompt: PromptStructure | None = None

    def __post_init__(self) -> None:
        if not self.scenario:
            raise ValueError("a rendering needs a scenario name")
        if not self.share > 0:
            raise ValueError(f"rendering {self.scenario!r}: share must be > 0")
        if self.system_extra_tokens < 0:
            raise ValueError(f"rendering {self.scenario!r}: system_extra_tokens must be >= 0")
        if self.prompt is not None and self.system_extra_tokens:
            raise ValueError(
                f"rendering {self.scenario!r}: a prompt of its own renders no extra tokens"
            )


@dataclass(frozen=True)
class Tenants:
    """The customers or workspaces a service's sessions belong to (the records'
    `tenant`): `count` of them, tenant k (from 1) drawn with weight 1 / k^`zipf_s`
    (a few big customers, a long tail), or with the given `shares` (relative
    weights, tenant k taking the k-th; `count` is then unused). Names are `prefix`
    and k, zero-padded."""

    count: int = 100
    zipf_s: float = 1.0
    shares: tuple[float, ...] = ()
    prefix: str = "tenant-"

    def __post_init__(self) -> None:
        if not all(w > 0 for w in self.shares):
            raise ValueError("tenant shares must be > 0")
        if self.size < 1:
            raise ValueError("a service needs at least one tenant")
        if self.zipf_s < 0:
            raise ValueError("zipf_s must be >= 0")

    @property
    def size(self) -> int:
        """How many tenants there are."""
        return len(self.shares) or self.count

    def name(self, k: int) -> str:
        """Tenant k's name (k from 1)."""
        return f"{self.prefix}{k:0{len(str(self.size))}d}"


@dataclass(frozen=True)
class ManagedProvider:
    """A managed API's prompt cache (Anthropic-style) serving a service instead of
    its own replicas: rules in `service.simulate.managed`. `ttl` is what the callers
    ask for in `cache_control` until a `CacheTtl` change; `min_prompt_tokens` is
    the model's minimum cacheable prompt (1,024 for Claude Sonnet and Opus)."""

    name: str = "anthropic"
    ttl: CacheTtlChoice = DEFAULT_CACHE_TTL
    min_prompt_tokens: int = 1024
    #: The callers ask for the provider's cache diagnostics: each turn's record
    #: carries them (`service.simulate.diagnostics`).
    diagnostics: bool = False


@dataclass(frozen=True)
class Service:
    """One calling application, served by its own pool of replicas, or by a
    managed API when `managed` is set (then `replicas`, `routing`, `kv_tokens`
    and `cache_key` play no part: a managed API routes and caches itself).

    `renderings`: the scenarios of its traffic, each a rendering of its prompt or a
    prompt of its own (see `Rendering`); its records then carry `scenario`, and the
    segments of their static start a `norm_hash`. None: one rendering, no `scenario`.
    `tenants`: whom its sessions serve (see `Tenants`); None: no `tenant`.

    `read_miss_rate`: the probability that a request's cache read comes back short
    (served from a cold machine, or only partly): it then reads a random shorter
    leading run of what was cached (possibly none) and recomputes, or on a managed
    provider writes, the rest. Real `cached_tokens` are that noisy."""

    name: str
    model: str
    prompt: PromptStructure = PromptStructure()
    peak_rate: float = 2.0  # user turns per second at the daily peak
    curve: DailyCurve = DailyCurve()
    users: int = 2_000
    replicas: int = 1
    routing: RoutingPolicy = "round_robin"
    kv_tokens: int | None = 1_048_576  # per replica; None = unbounded
    block_size: int = 256
    cache_key: CacheKeyMode | None = "session"
    affinity_blocks: int = 4  # prefix_affinity without cache_key hashes this many blocks
    latency: LatencyModel = LatencyModel()
    deploy: str | None = "v1.0.0"
    max_message_segments: int = 4  # message[i] segments listed per record
    managed: ManagedProvider | None = None
    renderings: tuple[Rendering, ...] = ()
    tenants: Tenants | None = None
    read_miss_rate: float = 0.0

    def __post_init__(self) -> None:
        names = [r.scenario for r in self.renderings]
        if len(set(names)) != len(names):
            raise ValueError(f"service {self.name!r}: two renderings name one scenario")
        if not 0.0 <= self.read_miss_rate <= 1.0:
            raise ValueError(f"service {self.name!r}: read_miss_rate must be within [0, 1]")

    def has_tenant(self, tenant: str) -> bool:
        """Whether `tenant` is one of the tenants its sessions are drawn from."""
        if self.tenants is None:
            return False
        prefix, size = self.tenants.prefix, self.tenants.size
        if not tenant.startswith(prefix) or not tenant[len(prefix) :].isdigit():
            return False
        k = int(tenant[len(prefix) :])
        return 1 <= k <= size and self.tenants.name(k) == tenant

    def scenario_index(self, scenario: str) -> int:
        """The index of the rendering that names this scenario."""
        for i, rendering in enumerate(self.renderings):
            if rendering.scenario == scenario:
                return i
        raise ValueError(f"service {self.name!r} has no scenario {scenario!r}")


# ---------------------------------------------------------------------------
# Timeline actions. Each is a first-class change that the engine applies.


@dataclass(frozen=True)
class Deploy:
    """A release with no effect on prompts or serving (only the tag changes)."""


@dataclass(frozen=True)
class DynamicSystemPrefix:
    """Something variable at the TOP of the system prompt: the current time
    (rounded to `granularity_s`), the user's name, or an id of the request (a
    ticket or trace id: new on every request)."""

    source: Literal["time", "user", "request"] = "time"
    tokens: int = 12
    granularity_s: float = 1.0


@dataclass(frozen=True)
class StaticSystemPrefix:
    """Fix of `DynamicSystemPrefix`: the system prompt is constant again."""


@dataclass(frozen=True)
class ShuffledTools:
    """Tools serialized in a random order on every request."""


@dataclass(frozen=True)
class CanonicalTools:
    """Fix of `ShuffledTools`: tools in their canonical order again."""


@dataclass(frozen=True)
class HistoryRewrite:
    """Each continuing turn replaces all but the last exchange with a fresh
    summary of `summary_ratio` times their tokens, instead of appending."""

    summary_ratio: float = 0.5


@dataclass(frozen=True)
class AppendOnlyHistory:
    """Fix of `HistoryRewrite`: history is appended to again."""


@dataclass(frozen=True)
class ScaleReplicas:
    """Set the replica count (new replicas start cold), optionally with a new
    routing policy. Posts no event unless the change asks for one."""

    replicas: int
    routing: RoutingPolicy | None = None


@dataclass(frozen=True)
class Routing:
    """Change the routing policy."""

    policy: RoutingPolicy


@dataclass(frozen=True)
class KvBudget:
    """Change every replica's KV-cache budget (tokens; None = unbounded)."""

    tokens_per_replica: int | None


@dataclass(frozen=True)
class Fanout:
    """After a share of user turns, the agent sends `k` parallel calls that share
    a fresh context of `context_tokens` (cold: nobody has it cached) plus a
    per-call instruction, all within `spread_ms`. k <= 1 turns fan-out off."""

    k: int = 10
    context_tokens: int = 3000
    call_tokens: int = 60
    share: float = 0.2
    spread_ms: float = 5.0
    reply: LengthDist = LengthDist(150, 0.5, 5, 2000)


@dataclass(frozen=True)
class TrafficMultiplier:
    """Multiply the service's arrival rate by `factor` (absolute, not cumulative)."""

    factor: float


@dataclass(frozen=True)
class CacheTtl:
    """A managed service's callers ask for this cache lifetime from now on."""

    ttl: CacheTtlChoice


@dataclass(frozen=True)
class AgentSession:
    """One session started by the change itself, beside the service's own: `turns`
    turns on the service's start (its first rendering's) with lengths of their own
    (large tool results, short think times), its history summarized on every turn
    when `rewrite` is set. One user's batch job or agent run that holds most of a
    quiet hour's tokens of a small service."""

    turns: int
    query: LengthDist = LengthDist(200, 0.5, 5, 4_000)
    tool_result: LengthDist | None = LengthDist(4_000, 0.5, 100, 32_000)
    reply: LengthDist = LengthDist(400, 0.5, 5, 4_000)
    think_time_s: LengthDist = LengthDist(30, 0.5, 2, 600)
    rewrite: HistoryRewrite | None = None
    tenant: str | None = None

    def __post_init__(self) -> None:
        if self.turns < 1:
            raise ValueError("an agent session needs at least one turn")


Action = (
    Deploy
    | DynamicSystemPrefix
    | StaticSystemPrefix
    | ShuffledTools
    | CanonicalTools
    | HistoryRewrite
    | AppendOnlyHistory
    | ScaleReplicas
    | Routing
    | KvBudget
    | Fanout
    | TrafficMultiplier
    | CacheTtl
    | AgentSession
)


#: The actions that change how prompts are built: the ones a release can roll out to
#: a share of the traffic, or apply to one scenario only.
PROMPT_ACTIONS = (
    Deploy,
    DynamicSystemPrefix,
    StaticSystemPrefix,
    ShuffledTools,
    CanonicalTools,
    HistoryRewrite,
    AppendOnlyHistory,
)


@dataclass(frozen=True)
class Change:
    """One timeline entry. `deploy` sets the service's release tag from then on.
    `post`: None means the default (a deploy event when `deploy` is set, except
    for a rollback, else a config event for `Routing`/`KvBudget`/`CacheTtl`, else
    nothing).

    `scenario`: a prompt action for that scenario of the service only (the other
    scenarios keep their prompts). `share`: a release rolled out to that share of
    the requests (a canary): they carry `deploy` and the release's prompt, the
    others keep the tag and prompt they had, side by side in the same minutes. A
    later change with the same `deploy` and a larger share widens it (its action
    applies on top), one with share 1 or None rolls it out to all the traffic, one
    with share 0 rolls it back. A change without `deploy` acts on every tag that
    serves.

    `tenant`: a prompt action for the sessions of that tenant only, whatever release
    serves them (a customer's own integration starting to send a request id at the
    top of the system prompt): it names no deploy tag and rolls out to no share."""

    at_s: float
    service: str
    action: Action
    deploy: str | None = None
    post: bool | None = None
    description: str | None = None
    scenario: str | None = None
    share: float | None = None
    tenant: str | None = None

    def __post_init__(self) -> None:
        prompt = isinstance(self.action, PROMPT_ACTIONS)
        if self.scenario is not None and not prompt:
            raise ValueError("only a prompt change can apply to one scenario")
        if self.tenant is not None:
            if not prompt or isinstance(self.action, Deploy):
                raise ValueError("only a prompt change can apply to one tenant")
            if self.deploy is not None or self.share is not None:
                raise ValueError("a tenant's own change carries no deploy tag and no share")
        if self.share is None:
            return
        if not 0.0 <= self.share <= 1.0:
            raise ValueError("a rollout share must be within [0, 1]")
        if self.deploy is None:
            raise ValueError("a rollout to a share of the traffic needs a deploy tag")
        if not prompt and self.share < 1.0:
            raise ValueError("only a prompt change can roll out to a share of the traffic")

    @property
    def partial(self) -> bool:
        """A canary: the release serves a share of the traffic, not none, not all."""
        return self.share is not None and 0.0 < self.share < 1.0


@dataclass(frozen=True)
class Scenario:
    name: str
    services: tuple[Service, ...]
    duration_s: float
    timeline: tuple[Change, ...] = ()
    start: datetime = DEFAULT_START
    seed: int = 0
    hash_format: HashFormat = "int"
    run_id: str | None = None  # request-id prefix; default derives from the seed

    def service(self, name: str) -> Service:
        for svc in self.services:
            if svc.name == name:
                return svc
        raise KeyError(name)
