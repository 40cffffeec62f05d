"""Replica KV caches and routing.

Each replica keeps an LRU cache of prefix blocks keyed by chained block hash.
The value is the block's ready time: the end of prefill of the request that
computes it. A block is served only once it is ready, so requests arriving
together on a cold prefix all miss it (the cold fan-out effect).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Sequence
from hashlib import blake2b

from service.simulate.prompt import mix64
from service.simulate.scenario import ROUTING_POLICIES, RoutingPolicy

_NEVER = float("inf")


class ReplicaCache:
    """An LRU block cache of `capacity` blocks (None: unbounded) on one replica.

    Algorithm, per request arriving at `now` with blocks h_0..h_{n-1}:
    1. `lookup` (or `hit`, which also touches the hit blocks): the hit is the
       longest leading run of blocks that are resident AND ready (ready_time
       <= now). A resident block still in prefill ends the run: the request
       computes it again.
    2. `admit`: every block is touched in order. Resident blocks move to the
       most-recent end (keeping their ready time: whoever computes first wins);
       absent blocks are inserted with ready_time = this request's prefill end.
       Then least-recent blocks are evicted while more than `capacity` are
       resident. Evicting after all insertions leaves the same set as evicting
       on each insertion: the `capacity` most recently touched blocks.
    """

    __slots__ = ("blocks", "capacity", "inflight", "name")

    def __init__(self, name: str, capacity: int | None) -> None:
        self.name = name
        self.capacity = capacity
        self.blocks: OrderedDict[int | str, float] = OrderedDict()
        self.inflight: list[float] = []  # end times of requests being served (a heap)

    def lookup(self, hashes: Sequence[int | str], now: float) -> int:
        """Number of leading blocks resident and ready at `now` (no side effect)."""
        blocks = self.blocks
        run = 0
        for h in hashes:
            if blocks.get(h, _NEVER) > now:
                break
            run += 1
        return run

    def hit(self, hashes: Sequence[int | str], now: float) -> int:
        """`lookup`, touching the hit blocks on the way (step 2 for them); the
        caller then calls `admit` with the returned run for the rest."""
        blocks = self.blocks
        get = blocks.get
        move = blocks.move_to_end
        run = 0
        for h in hashes:
            if get(h, _NEVER) > now:
                break
            move(h)
            run += 1
        return run

    def admit(
        self, hashes: Sequence[int | str], run: int, ready_at: float, touched: bool = False
    ) -> None:
        """Touch all blocks of a request whose first `run` blocks were hits
        (`touched`: those were already touched by `hit`)."""
        blocks = self.blocks
        move = blocks.move_to_end
        if not touched:
            for i in range(run):
                move(hashes[i])
        for i in range(run, len(hashes)):
            h = hashes[i]
            if h in blocks:
                move(h)
            else:
                blocks[h] = ready_at
        self.evict()

    def evict(self) -> None:
        capacity = self.capacity
        if capacity is None:
            return
        blocks = self.blocks
        pop = blocks.popitem
        while len(blocks) > capacity:
            pop(last=False)

    def load(self, now: float) -> int:
        """Requests still being served at `now`."""
        inflight = self.inflight
        while inflight and inflight[0] <= now:
            heapq.heappop(inflight)
        return len(inflight)

    def start(self, end: float) -> None:
        heapq.heappush(self.inflight, end)


def key_hash(key: str) -> int:
    return int.from_bytes(blake2b(key.encode(), digest_size=8).digest(), "little")


class ReplicaPool:
    """The replicas of one service and its routing policy.

    - `round_robin`: the i-th request goes to replica i mod N.
    - `prefix_affinity`: rendezvous hashing of the request's `cache_key` when
      it has one, else of its first `affinity_blocks` block hashes (chained, so
      the last of them identifies them all). Rendezvous hashing (highest
      mix64(key ^ replica salt) wins) keeps most keys in place when N changes.
    - `least_loaded`: the replica with the fewest requests in flight; ties go
      round-robin so that an idle pool still spreads its load.
    """

    def __init__(
        self,
        prefix: str,
        replicas: int,
        kv_tokens: int | None,
        block_size: int,
        policy: RoutingPolicy,
        affinity_blocks: int = 4,
    ) -> None:
        if replicas < 1:
            raise ValueError("a service needs at least one replica")
        self.prefix = prefix
        self.block_size = block_size
        self.kv_tokens = kv_tokens
        self.affinity_blocks = max(1, affinity_blocks)
        self.replicas: list[ReplicaCache] = []
        self._salts: list[int] = []
        self._rr = 0
        self.policy: RoutingPolicy = policy
        self.set_policy(policy)
        self.resize(replicas)

    @property
    def capacity_blocks(self) -> int | None:
        return None if self.kv_tokens is None else self.kv_tokens // self.block_size

    def set_policy(self, policy: RoutingPolicy) -> None:
        if policy not in ROUTING_POLICIES:
            raise ValueError(f"unknown routing policy {policy!r}")
        self.policy = policy

    def resize(self, replicas: int) -> None:
        """Scale to `replicas`: new ones start cold, removed ones lose their cache."""
        if replicas < 1:
            raise ValueError("a service needs at least one replica")
        while len(self.replicas) < replicas:
            index = len(self.replicas)
            self.replicas.append(ReplicaCache(f"{self.prefix}-{index}", self.capacity_blocks))
            self._salts.append(mix64(key_hash(f"{self.prefix}-{index}")))
        del self.replicas[replicas:]
        del self._salts[replicas:]

    def set_kv_tokens(self, kv_tokens: int | None) -> None:
        self.kv_tokens = kv_tokens
        for replica in self.replicas:
            replica.capacity = self.capacity_blocks
            replica.evict()

    def route(self, hashes: Sequence[int | str], key: int | None, now: float) -> ReplicaCache:
        """The replica for a request; `key` is its hashed cache_key, if any."""
        replicas = self.replicas
        n = len(replicas)
        if n == 1:
            return replicas[0]
        policy = self.policy
        if policy == "round_robin":
            self._rr += 1
            return replicas[(self._rr - 1) % n]
        if policy == "prefix_affinity":
            if key is None:
                if not hashes:
                    key = 0
                else:
                    last = hashes[min(self.affinity_blocks, len(hashes)) - 1]
                    key = last if isinstance(last, int) else key_hash(last)
            key &= (1 << 64) - 1
            salts = self._salts
            best = max(range(n), key=lambda i: mix64(key ^ salts[i]))
            return replicas[best]
        # least_loaded
        start = self._rr % n
        self._rr += 1
        best_i = start
        best_load = replicas[start].load(now)
        for step in range(1, n):
            i = (start + step) % n
            load = replicas[i].load(now)
            if load < best_load:
                best_i, best_load = i, load
        return replicas[best_i]
