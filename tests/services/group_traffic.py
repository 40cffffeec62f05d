"""Traffic of one service with scenarios, tenants and deploy tags, for the tests of
group regressions and canaries (contract sections 5 and 5a). `cached_tokens` come
from one unbounded cache of the model (whatever was sent before is cached), so only
what a builder breaks loses reuse.

Every request is 20 blocks of 100 tokens: 16 of its scenario's shared start, then 4
of its own. A broken start is a unique first block (a timestamp at the top)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from tests.services.traffic import T0, rec

STEP_S = 5.0  # a request every 5 s: 720 an hour
SHARED, OWN = 16, 4
#: Every 20th request is the ticket summary: 5% of the service's tokens.
TICKET_EVERY = 20


@dataclass
class Plan:
    hours: float = 4.0
    #: When the ticket-summary scenario's start breaks (seconds from T0), or never.
    ticket_breaks_at: float | None = None
    #: When every request's start breaks.
    service_breaks_at: float | None = None
    #: When 10% of the requests start carrying deploy v2 (the others v1).
    canary_at: float | None = None
    canary_share: float = 0.10
    canary_broken: bool = True
    tenants: int = 5
    seed: int = 1
    held: set[int] = field(default_factory=set)


def _blocks(scenario: str, i: int, broken: bool) -> list[int]:
    base = 1000 if scenario == "chat" else 2000
    start = [base + b for b in range(SHARED)]
    if broken:
        start[0] = 10_000_000 + i  # a timestamp at the top: every request differs
    return start + [50_000_000 + i * OWN + b for b in range(OWN)]


def _cached(plan: Plan, blocks: list[int]) -> int:
    run = 0
    for b in blocks:
        if b not in plan.held:
            break
        run += 1
    plan.held.update(blocks)
    return run * 100


def traffic(plan: Plan) -> list[dict[str, Any]]:
    rng = random.Random(plan.seed)
    out = []
    for i in range(int(plan.hours * 3600 / STEP_S)):
        t = i * STEP_S
        scenario = "ticket-summary" if i % TICKET_EVERY == 0 else "chat"
        canary = plan.canary_at is not None and t >= plan.canary_at
        new_tag = canary and rng.random() < plan.canary_share
        broken = (
            (plan.service_breaks_at is not None and t >= plan.service_breaks_at)
            or (scenario == "ticket-summary" and plan.ticket_breaks_at is not None
                and t >= plan.ticket_breaks_at)
            or (new_tag and plan.canary_broken)
        )  # fmt: skip
        blocks = _blocks(scenario, i, broken)
        out.append(
            rec(
                f"g{i}",
                T0 + t,
                blocks,
                prompt_tokens=len(blocks) * 100,
                cached_tokens=_cached(plan, blocks),
                scenario=scenario,
                tenant=f"tenant-{rng.randrange(plan.tenants)}",
                deploy="v2" if new_tag else "v1",
                ttft_ms=rng.uniform(100, 900),
            )
        )
    return out


def sparse_tenants(tenants: int, hours: float, seed: int = 3) -> list[dict[str, Any]]:
    """`tenants` tenants sending a request now and then (about 1.2 each), all with the
    same healthy shared start."""
    rng = random.Random(seed)
    plan = Plan()
    n = int(tenants * 1.2)
    out = []
    for i, t in enumerate(sorted(rng.uniform(0, hours * 3600) for _ in range(n))):
        blocks = _blocks("chat", i, broken=False)
        out.append(
            rec(
                f"s{i}",
                T0 + t,
                blocks,
                prompt_tokens=len(blocks) * 100,
                cached_tokens=_cached(plan, blocks),
                scenario="chat",
                tenant=f"tenant-{i if i < tenants else rng.randrange(tenants)}",
                ttft_ms=rng.uniform(100, 900),
            )
        )
    return out
