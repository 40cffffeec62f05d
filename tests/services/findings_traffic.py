"""Traffic with exactly one anti-pattern of contract section 5b, or none, for the
findings' tests. Each builder returns usage records (dicts, as sent) whose
`cached_tokens` come from a small cache model: per replica (or one, for a managed
provider), the blocks it holds, with an LRU capacity or a TTL, so that only the
anti-pattern the builder plants can lose reuse.

Requests are 100-token blocks: `tools` (1 block) and `system` (2 blocks), then the
messages (2 blocks each)."""

from __future__ import annotations

import random
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from tests.services.traffic import T0

BLOCK = 100
HOURS = 3
STEP_S = 10.0  # one request every 10 s: 360 an hour
TOOLS, SYSTEM = 1, (2, 3)
MODELS_FILE = """
[[model]]
match = "managed-*"
provider = "anthropic"
ttl_s = 300
input_usd_per_mtok = 3.0
cached_usd_per_mtok = 0.3
write_usd_per_mtok = 3.75

[[model]]
match = "short-*"
provider = "anthropic"
min_prompt_tokens = 1024
input_usd_per_mtok = 3.0
cached_usd_per_mtok = 0.3
"""


@dataclass
class Cache:
    """Blocks held, per replica: an LRU of `capacity` blocks (None: unbounded), or,
    with `ttl_s`, each block until ttl_s after its last use."""

    capacity: int | None = None
    ttl_s: float | None = None
    held: dict[str, OrderedDict[int, float]] = field(default_factory=dict)

    def serve(self, replica: str, blocks: list[int], ts: float, cacheable: bool = True) -> int:
        held = self.held.setdefault(replica, OrderedDict())
        run = 0
        for b in blocks:
            if b in held and (self.ttl_s is None or ts - held[b] <= self.ttl_s):
                run += 1
            else:
                break
        for b in blocks:
            held[b] = ts
            held.move_to_end(b)
        while self.capacity is not None and len(held) > self.capacity:
            held.popitem(last=False)
        return run * BLOCK if cacheable else 0


def _segments(system_hash: str, norm: str | None, messages: int) -> list[dict[str, Any]]:
    system: dict[str, Any] = {"name": "system", "hash": system_hash, "tokens": 2 * BLOCK}
    if norm is not None:
        system["norm_hash"] = norm
    return [
        {"name": "tools", "hash": "tools-1", "tokens": BLOCK},
        system,
        *[{"name": f"message[{i}]", "hash": f"m{i}", "tokens": 2 * BLOCK} for i in range(messages)],
    ]


def _record(
    i: int,
    ts: float,
    blocks: list[int],
    cached: int,
    segments: list[dict[str, Any]],
    **extra: Any,
) -> dict[str, Any]:
    return {
        "request_id": f"q{i}",
        "ts": ts,
        "service": extra.pop("service", "assistant"),
        "model": extra.pop("model", "m"),
        "prompt_tokens": len(blocks) * BLOCK,
        "cached_tokens": cached,
        "block_size": BLOCK,
        "block_hashes": blocks,
        "segments": segments,
        "ttft_ms": extra.pop("ttft_ms", 80.0),
        **extra,
    }


def _static(system: tuple[int, int] = SYSTEM) -> list[int]:
    return [TOOLS, *system]


def sessions(
    *,
    replicas: int = 2,
    affinity: bool = True,
    rewrite: bool = False,
    capacity: int | None = None,
    concurrent_sessions: int = 12,
    turns: int = 6,
    seed: int = 1,
    model: str = "m",
    ttl_s: float | None = None,
    step_s: float = STEP_S,
    volatile_system: bool = False,
) -> list[dict[str, Any]]:
    """Conversations over a shared start: each turn appends two blocks (or, with
    `rewrite`, renders the whole history anew). Sessions go to a replica by
    affinity, or to a random one; `capacity` bounds each replica's cache."""
    rng = random.Random(seed)
    cache = Cache(capacity=capacity, ttl_s=ttl_s)
    out: list[dict[str, Any]] = []
    live: dict[int, int] = {}  # session -> turns so far
    next_session = 0
    n = int(HOURS * 3600 / step_s)
    for i in range(n):
        if len(live) < concurrent_sessions:
            live[next_session] = 0
            next_session += 1
        k = rng.choice(sorted(live))
        t = live[k]
        history = [
            10_000_000 + k * 1000 + (t * 100 if rewrite else 0) + j for j in range(2 * (t + 1))
        ]
        system = (5_000_000 + 2 * i, 5_000_001 + 2 * i) if volatile_system else SYSTEM
        if volatile_system:  # the history's blocks are chained after the system prompt
            history = [b + 100_000_000 * (i + 1) for b in history]
        blocks = [*_static(system), *history]
        replica = f"r{k % replicas}" if affinity else f"r{rng.randrange(replicas)}"
        ts = T0 + i * step_s
        managed = ttl_s is not None
        cached = cache.serve("provider" if managed else replica, blocks, ts)
        extra: dict[str, Any] = {"session_id": f"s{k}", "model": model}
        if not managed:
            extra["replica"] = replica
        sys_hash = f"t{i}" if volatile_system else "sys-1"
        segments = _segments(sys_hash, sys_hash if volatile_system else "n-sys", t + 1)
        out.append(_record(i, ts, blocks, cached, segments, **extra))
        live[k] = t + 1
        if live[k] >= turns:
            del live[k]
    return out


def healthy() -> list[dict[str, Any]]:
    """One rendering, append-only sessions, affinity routing, a budget above the
    working set: nothing to find."""
    return sessions()


def history_rewrite() -> list[dict[str, Any]]:
    return sessions(rewrite=True)


def routing() -> list[dict[str, Any]]:
    return sessions(replicas=3, affinity=False)


def eviction() -> list[dict[str, Any]]:
    """Affinity, but each replica holds 20 blocks: the history of 12 interleaved
    sessions does not fit."""
    return sessions(capacity=20, concurrent_sessions=24)


def expiry() -> list[dict[str, Any]]:
    """A managed provider with a 5-minute TTL (MODELS_FILE) whose users pause about
    7 minutes between turns (the shared start stays warm: other users use it)."""
    return sessions(model="managed-sonnet", ttl_s=300.0, concurrent_sessions=42)


def standalone(
    *,
    system: str = "fixed",
    scenarios: bool = False,
    fanout: int = 1,
    model: str = "m",
    extra_blocks: int = 3,
    cacheable_by_provider: bool = True,
) -> list[dict[str, Any]]:
    """Requests without sessions, each the shared start, one of 20 documents
    (2 blocks, reused) and a unique question. `system`: "fixed" (one hash),
    "volatile" (a timestamp: every request its own), "drift" (two renderings:
    scenario web-chat 60%, api-agent 40%, the same norm_hash). `fanout`: requests
    sent in bursts of that many within 1 ms, their TTFT 500 ms."""
    rng = random.Random(7)
    cache = Cache()
    out: list[dict[str, Any]] = []
    n = int(HOURS * 3600 / STEP_S)
    for i in range(n):
        burst, within = divmod(i, fanout)
        ts = T0 + burst * STEP_S * fanout + within * 0.001
        doc = burst % 20 if fanout == 1 else 1000 + burst  # a burst shares a new document
        extra: dict[str, Any] = {"model": model, "replica": "r0"}
        if system == "volatile":
            sys_blocks, sys_hash, norm = (5_000_000 + 2 * i, 5_000_001 + 2 * i), f"t{i}", f"t{i}"
        elif system == "drift" and rng.random() < 0.4:
            sys_blocks, sys_hash, norm = (20, 21), "sys-2", "n-sys"
            extra["scenario"] = "api-agent"
        else:
            sys_blocks, sys_hash, norm = SYSTEM, "sys-1", "n-sys"
            if system == "drift":
                extra["scenario"] = "web-chat"
        doc_blocks = [
            1_000_000 + sys_blocks[0] * 100_000 + doc * 10 + j for j in range(extra_blocks - 1)
        ]
        blocks = [*_static(sys_blocks), *doc_blocks, 9_000_000 + i]
        cached = cache.serve("r0", blocks, ts, cacheable_by_provider)
        if fanout > 1:
            extra["ttft_ms"] = 500.0
            # The burst's others find only the shared start warm: the document is
            # still in the first one's prefill.
            cached = 3 * BLOCK if within else cached
        out.append(_record(i, ts, blocks, cached, _segments(sys_hash, norm, 1), **extra))
    return out


def volatile_segment() -> list[dict[str, Any]]:
    return standalone(system="volatile")


def template_drift() -> list[dict[str, Any]]:
    return standalone(system="drift")


def cold_fanout() -> list[dict[str, Any]]:
    return standalone(fanout=8)


def below_minimum() -> list[dict[str, Any]]:
    """Short prompts (600 tokens) on a model whose provider caches 1,024 or more."""
    return standalone(model="short-haiku", cacheable_by_provider=False)
