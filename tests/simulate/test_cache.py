"""LRU block caches with in-flight prefill, and routing policies."""

from collections import Counter

import pytest

from service.simulate.cache import ReplicaCache, ReplicaPool, key_hash


def serve(cache: ReplicaCache, hashes: list[int], now: float, prefill_s: float = 0.0) -> int:
    run = cache.lookup(hashes, now)
    cache.admit(hashes, run, now + prefill_s)
    return run


def test_hit_is_the_longest_leading_run_of_resident_blocks() -> None:
    cache = ReplicaCache("r", None)
    assert serve(cache, [1, 2, 3], 0.0) == 0
    assert serve(cache, [1, 2, 3, 4], 1.0) == 3
    # A missing block ends the run even when later blocks are resident.
    assert serve(cache, [1, 9, 3, 4], 2.0) == 1
    assert serve(cache, [7, 2, 3], 3.0) == 0


def test_lru_evicts_the_least_recently_touched_blocks() -> None:
    cache = ReplicaCache("r", 4)
    serve(cache, [1, 2], 0.0)
    serve(cache, [3, 4], 1.0)
    serve(cache, [1, 2], 2.0)  # touch 1, 2: now 3, 4 are the least recent
    serve(cache, [5, 6], 3.0)
    assert list(cache.blocks) == [1, 2, 5, 6]
    assert serve(cache, [3, 4], 4.0) == 0
    assert serve(cache, [5, 6], 5.0) == 2


def test_a_prompt_larger_than_the_cache_keeps_only_its_tail() -> None:
    cache = ReplicaCache("r", 3)
    serve(cache, [1, 2, 3, 4, 5], 0.0)
    assert list(cache.blocks) == [3, 4, 5]
    assert serve(cache, [1, 2, 3, 4, 5], 1.0) == 0  # block 1 is gone: no leading run


def test_hit_then_admit_equals_lookup_then_admit() -> None:
    a, b = ReplicaCache("a", 6), ReplicaCache("b", 6)
    requests = [[1, 2, 3], [1, 2, 4, 5], [6, 7], [1, 2, 3, 8], [9, 1], [1, 2, 4]]
    for t, hashes in enumerate(requests):
        run_a = a.lookup(hashes, float(t))
        a.admit(hashes, run_a, float(t))
        run_b = b.hit(hashes, float(t))
        b.admit(hashes, run_b, float(t), touched=True)
        assert run_a == run_b
        assert list(a.blocks.items()) == list(b.blocks.items())


def test_unbounded_cache_never_evicts() -> None:
    cache = ReplicaCache("r", None)
    for i in range(1000):
        serve(cache, [i], float(i))
    assert len(cache.blocks) == 1000


def test_a_block_in_prefill_is_not_served_until_that_prefill_ends() -> None:
    cache = ReplicaCache("r", None)
    # Request A computes blocks 1..3; its prefill ends at t = 0.5.
    assert serve(cache, [1, 2, 3], 0.0, prefill_s=0.5) == 0
    # B arrives during A's prefill: no hit for A's blocks.
    assert serve(cache, [1, 2, 3, 4], 0.2, prefill_s=0.5) == 0
    # B's own new block 4 (ready at 0.7) does not make A's blocks ready earlier.
    assert cache.blocks[1] == 0.5
    assert cache.blocks[4] == pytest.approx(0.7)
    # C after A's prefill but during B's: blocks 1..3 hit, block 4 does not.
    assert serve(cache, [1, 2, 3, 4], 0.6) == 3
    assert serve(cache, [1, 2, 3, 4], 0.8) == 4


def test_capacity_change_evicts_at_once() -> None:
    pool = ReplicaPool("svc", 1, None, 16, "round_robin")
    replica = pool.replicas[0]
    serve(replica, list(range(10)), 0.0)
    pool.set_kv_tokens(16 * 4)
    assert list(replica.blocks) == [6, 7, 8, 9]
    pool.set_kv_tokens(None)
    serve(replica, list(range(100, 200)), 1.0)
    assert len(replica.blocks) == 104


def test_round_robin_cycles_through_replicas() -> None:
    pool = ReplicaPool("svc", 3, None, 16, "round_robin")
    names = [pool.route([1], None, 0.0).name for _ in range(6)]
    assert names == ["svc-0", "svc-1", "svc-2", "svc-0", "svc-1", "svc-2"]


def test_prefix_affinity_is_sticky_per_key_and_spreads_keys() -> None:
    pool = ReplicaPool("svc", 4, None, 16, "prefix_affinity")
    keys = [key_hash(f"session-{i}") for i in range(2000)]
    first = [pool.route([1], k, 0.0).name for k in keys]
    assert first == [pool.route([2], k, 5.0).name for k in keys]
    spread = Counter(first)
    assert len(spread) == 4 and min(spread.values()) > 400
    # Rendezvous hashing: scaling to 5 moves about a fifth of the keys, all to the new one.
    pool.resize(5)
    moved = [(a, pool.route([1], k, 0.0).name) for a, k in zip(first, keys, strict=True)]
    changed = [b for a, b in moved if a != b]
    assert 0.12 < len(changed) / len(keys) < 0.28
    assert set(changed) == {"svc-4"}


def test_prefix_affinity_without_key_hashes_the_first_blocks() -> None:
    pool = ReplicaPool("svc", 8, None, 16, "prefix_affinity", affinity_blocks=2)
    # Same first two blocks (chained: block 1 identifies both), different tails.
    same = {pool.route([10, 11, i], None, 0.0).name for i in range(50)}
    assert len(same) == 1
    different = {pool.route([10, i], None, 0.0).name for i in range(200)}
    assert len(different) == 8


def test_least_loaded_picks_the_replica_with_fewest_requests_in_flight() -> None:
    pool = ReplicaPool("svc", 3, None, 16, "least_loaded")
    a = pool.route([1], None, 0.0)
    a.start(10.0)
    b = pool.route([1], None, 0.0)
    b.start(10.0)
    assert len({a.name, b.name}) == 2
    c = pool.route([1], None, 0.0)
    assert c.name not in {a.name, b.name}
    c.start(1.0)
    # At t=2, c's request has finished: c is the least loaded.
    assert pool.route([1], None, 2.0).name == c.name
    assert c.load(2.0) == 0 and a.load(2.0) == 1


def test_scale_down_drops_replicas_and_their_caches() -> None:
    pool = ReplicaPool("svc", 4, None, 16, "round_robin")
    pool.resize(2)
    assert [r.name for r in pool.replicas] == ["svc-0", "svc-1"]
    with pytest.raises(ValueError):
        pool.resize(0)
    with pytest.raises(ValueError):
        pool.set_policy("random")  # type: ignore[arg-type]
