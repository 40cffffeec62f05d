"""Replay a Mooncake-format trace through simulated replicas, routing and caches.

Each line is `{"timestamp": ms, "input_length", "output_length", "hash_ids"}`
with 512-token blocks and chained `hash_ids`; the ids are used as block keys
directly and passed through as the records' `block_hashes`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import orjson

from service.simulate.cache import ReplicaPool
from service.simulate.engine import MAX_BLOCK_HASHES, Record
from service.simulate.scenario import DEFAULT_START, LatencyModel, RoutingPolicy
from service.simulate.timefmt import TsFormatter
from service.simulate.traffic import Normals

MOONCAKE_BLOCK_SIZE = 512


@dataclass(frozen=True)
class MooncakeRequest:
    line: int
    timestamp_ms: int
    input_length: int
    output_length: int
    hash_ids: list[int]


def read_mooncake(path: str | Path) -> list[MooncakeRequest]:
    """All requests of a trace, ordered by timestamp (ties keep line order)."""
    requests: list[MooncakeRequest] = []
    with Path(path).open("rb") as handle:
        for number, raw in enumerate(handle):
            if not raw.strip():
                continue
            item = orjson.loads(raw)
            requests.append(
                MooncakeRequest(
                    number,
                    int(item["timestamp"]),
                    int(item["input_length"]),
                    int(item.get("output_length", 0)),
                    [int(h) for h in item["hash_ids"]],
                )
            )
    requests.sort(key=lambda r: r.timestamp_ms)  # stable: ties stay in line order
    return requests


def iter_mooncake(
    path: str | Path,
    *,
    replicas: int = 1,
    routing: RoutingPolicy = "round_robin",
    kv_tokens: int | None = None,
    block_size: int = MOONCAKE_BLOCK_SIZE,
    service: str = "mooncake",
    model: str = "mooncake",
    start: datetime = DEFAULT_START,
    latency: LatencyModel | None = None,
    affinity_blocks: int = 4,
    seed: int = 0,
    request_prefix: str = "mooncake-",
) -> Iterator[Record]:
    """Usage records of the trace as served by `replicas` replicas of
    `kv_tokens` tokens each (None: unbounded). `request_id` is the prefix plus
    the line number; prefill is in flight for each request's TTFT."""
    lat = latency or LatencyModel()
    fmt = TsFormatter(start)
    pool = ReplicaPool(service, replicas, kv_tokens, block_size, routing, affinity_blocks)
    normals = Normals(np.random.default_rng([seed, 0x3007]))
    for req in read_mooncake(path):
        t = req.timestamp_ms / 1000.0
        hashes = req.hash_ids
        replica = pool.route(hashes, None, t)
        run = replica.hit(hashes, t)
        cached = min(req.input_length, run * block_size)
        ttft = lat.base_ms + lat.per_uncached_token_ms * (req.input_length - cached)
        ttft += lat.per_cached_token_ms * cached
        if lat.jitter_sigma > 0:
            ttft *= math.exp(lat.jitter_sigma * normals())
        replica.admit(hashes, run, t + ttft / 1000.0, touched=True)
        latency_ms = ttft + req.output_length * lat.per_output_token_ms
        replica.start(t + latency_ms / 1000.0)
        yield {
            "request_id": f"{request_prefix}{req.line}",
            "ts": fmt(t),
            "service": service,
            "model": model,
            "prompt_tokens": req.input_length,
            "cached_tokens": cached,
            "completion_tokens": req.output_length,
            "ttft_ms": round(ttft, 2),
            "latency_ms": round(latency_ms, 2),
            "replica": replica.name,
            "block_size": block_size,
            "block_hashes": hashes[:MAX_BLOCK_HASHES],
        }
