"""Days of traffic shaped like production, for the tests of what is and is not a
regression (contract section 5c): busy weekdays, quiet evenings, nights and
weekends, tenants, sessions, and one thing planted at a time.

Each request is a shared start of `SHARED` blocks (the system prompt and tools),
`TENANT` blocks of its tenant's own context (a workspace's documents: a sparse tenant's
expire between its requests at night, deeper than the shared start) and `OWN` blocks
of its own. `cached_tokens` come from a cache model: a managed API's
(a block lives `ttl_s` after its last use: quiet hours expire the shared start, the
nightly lull), or a self-hosted replica's (unbounded; `Plan.eviction` makes a
growing share of requests miss what the replica had: a working set outgrowing its
KV budget). Requests carry `replica` only when self-hosted."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: 2025-03-03T00:00:00Z, a Monday.
MONDAY = 1_740_960_000
DAY = 86_400
HOUR = 3_600
BLOCK = 100
SHARED, TENANT, OWN = 8, 6, 4
MODELS_FILE = """
[[model]]
match = "claude-season-*"
provider = "anthropic"
ttl_s = 300
input_usd_per_mtok = 3.0
cached_usd_per_mtok = 0.3
write_usd_per_mtok = 3.75
"""


def traffic_curve(t: float, night: float = 0.06, weekend: float = 0.35) -> float:
    """Relative traffic at `t` seconds after MONDAY: 1 at the day's peak, `night` at
    night, days from 7:00 to 21:00, weekends at `weekend` of a weekday."""
    hour = (t % DAY) / HOUR
    phase = min(max((hour - 7.0) / 14.0, 0.0), 1.0)
    curve = night + (1.0 - night) * math.sin(math.pi * phase) ** 1.5
    return curve * (weekend if (t // DAY) % 7 >= 5 else 1.0)


@dataclass
class Break:
    """From `start` for `seconds` (seconds after MONDAY), the requests `where` says
    (all, by default) start with a unique block: a timestamp at the top."""

    start: float
    seconds: float
    where: Callable[[dict[str, Any]], bool] = lambda record: True


@dataclass
class Plan:
    days: float = 6.0
    #: Requests a second at the busiest hour.
    peak: float = 0.05
    service: str = "assistant"
    #: A managed API's model (`MODELS_FILE`: TTL 5 minutes), or a self-hosted one.
    managed: bool = True
    tenants: int = 8
    #: Tenant k gets weight 1 / k; this one gets `sparse_weight` (a few requests an hour).
    sparse_tenant: str | None = None
    sparse_weight: float = 0.02
    #: A tenant on the other side of the world: its working day is the service's
    #: evening and night, `late_rate` requests a second at its peak.
    late_tenant: str | None = None
    late_rate: float = 0.01
    breaks: list[Break] = field(default_factory=list)
    #: Self-hosted: from this time, a share of requests growing `eviction_per_day` a day
    #: misses what its replica held (a working set growing against a fixed budget).
    eviction_from: float | None = None
    eviction_per_day: float = 0.12
    #: One session sending `dominant_requests` large requests that rewrite their history
    #: (nothing cached) over `dominant_seconds` from `dominant_at`.
    dominant_at: float | None = None
    dominant_seconds: float = 1800.0
    dominant_requests: int = 40
    seed: int = 3

    @property
    def model(self) -> str:
        return "claude-season-1" if self.managed else "llama-season-70b"


def traffic(plan: Plan) -> list[dict[str, Any]]:
    """The plan's records in time order."""
    rng = random.Random(plan.seed)
    arrivals = [(t, None) for t in _arrivals(rng, plan.peak, plan.days)]
    if plan.late_tenant is not None:
        late = _arrivals(rng, plan.late_rate, plan.days, shift=10 * HOUR)
        arrivals = sorted([*arrivals, *[(t, plan.late_tenant) for t in late]])
    cache: dict[int, float] = {}
    records = [_request(plan, rng, cache, i, t, tenant) for i, (t, tenant) in enumerate(arrivals)]
    if plan.dominant_at is not None:
        records += _dominant_session(plan, cache)
    return sorted(records, key=lambda r: r["ts"])


def _arrivals(rng: random.Random, peak: float, days: float, shift: float = 0.0) -> list[float]:
    """Poisson arrivals at `peak` a second thinned to the curve (shifted `shift`
    seconds later: a day elsewhere in the world)."""
    out, t = [], 0.0
    while True:
        t += rng.expovariate(peak)
        if t >= days * DAY:
            return out
        if rng.random() < traffic_curve(t - shift):
            out.append(t)


def _tenant(plan: Plan, rng: random.Random) -> str:
    names = [f"tenant-{k}" for k in range(1, plan.tenants + 1)]
    weights = [1.0 / k for k in range(1, plan.tenants + 1)]
    if plan.sparse_tenant is not None:
        names.append(plan.sparse_tenant)
        weights.append(plan.sparse_weight * sum(weights))
    return rng.choices(names, weights)[0]


def _request(
    plan: Plan, rng: random.Random, cache: dict[int, float], i: int, t: float, tenant: str | None
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "request_id": f"{plan.service}-{plan.seed}-{i}",
        "ts": MONDAY + t,
        "service": plan.service,
        "model": plan.model,
        "tenant": tenant or _tenant(plan, rng),
        "session_id": f"s{rng.randrange(400)}-{int(t // HOUR)}",
        "ttft_ms": 300.0,
    }
    broken = any(b.start <= t < b.start + b.seconds and b.where(record) for b in plan.breaks)
    shared = [1_000 + b for b in range(SHARED)]
    if broken:
        shared[0] = 5_000_000 + i
    tenant = [2_000_000 + hash_name(record["tenant"]) * 100 + b for b in range(TENANT)]
    blocks = shared + tenant + [10_000_000 + i * OWN + b for b in range(OWN)]
    run = _served(plan, rng, cache, blocks, t)
    record |= {
        "prompt_tokens": len(blocks) * BLOCK,
        "cached_tokens": run * BLOCK,
        "block_size": BLOCK,
        "block_hashes": blocks,
    }
    if not plan.managed:
        record["replica"] = "r0"
    return record


def hash_name(name: str) -> int:
    """A small stable number for a name (Python's own hash is salted per process)."""
    return sum(ord(c) * 31**k for k, c in enumerate(name)) % 10_007


def _served(
    plan: Plan, rng: random.Random, cache: dict[int, float], blocks: list[int], t: float
) -> int:
    """The leading blocks the cache holds at `t`; then every block is used at `t`."""
    ttl = 300.0 if plan.managed else math.inf
    run = next((k for k, b in enumerate(blocks) if t - cache.get(b, -math.inf) > ttl), len(blocks))
    if plan.eviction_from is not None and t >= plan.eviction_from:
        evicted = plan.eviction_per_day * (t - plan.eviction_from) / DAY
        if rng.random() < evicted:
            run = 0
    for b in blocks:
        cache[b] = t
    return run


def _dominant_session(plan: Plan, cache: dict[int, float]) -> list[dict[str, Any]]:
    """One long agent session: big requests (40 blocks) whose history it rewrites each
    turn, so none of it is cached but the shared start's first block."""
    assert plan.dominant_at is not None
    out = []
    for k in range(plan.dominant_requests):
        t = plan.dominant_at + k * plan.dominant_seconds / plan.dominant_requests
        blocks = [1_000, *[20_000_000 + k * 100 + b for b in range(39)]]
        out.append(
            {
                "request_id": f"{plan.service}-dominant-{k}",
                "ts": MONDAY + t,
                "service": plan.service,
                "model": plan.model,
                "tenant": "tenant-1",
                "session_id": "the-long-agent-session",
                "prompt_tokens": len(blocks) * BLOCK,
                "cached_tokens": BLOCK,
                "block_size": BLOCK,
                "block_hashes": blocks,
                "ttft_ms": 300.0,
                **({} if plan.managed else {"replica": "r0"}),
            }
        )
        cache[1_000] = t
    return out


def at(day: float, hour: float = 0.0) -> float:
    """Seconds after MONDAY."""
    return day * DAY + hour * HOUR
