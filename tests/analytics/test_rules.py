"""One small hand-built case per rule of contract section 4.

Each case states the expected values by hand and checks both the vectorized
pass and the naive reference against them."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import polars as pl
import pytest

from service.analytics import (
    LateRecordsError,
    ReuseState,
    compute_request_metrics,
    plan_recompute,
)
from tests.analytics.reference import Record, record, request_metrics, to_frame

S = 1_000_000  # microseconds per second
W = 3600.0


def run(records: list[Record], window_s: float = W) -> dict[int, dict[str, Any]]:
    """Per-request values by id; the reference must agree on every one."""
    results, _ = compute_request_metrics(to_frame(records), window_s)
    got = {row["id"]: row for row in results.to_dicts()}
    assert got == request_metrics(records, window_s)
    return got


def blocks(i: int, *hashes: int, t: float, **fields: Any) -> Record:
    """A request of block_size 100 with prompt_tokens = 100 per block by default."""
    fields.setdefault("prompt_tokens", 100 * len(hashes))
    return record(id=i, ts_us=round(t * S), block_size=100, block_hashes=list(hashes), **fields)


# --- seen blocks and the window -------------------------------------------------


def test_window_expiry_is_inclusive_at_w() -> None:
    got = run([blocks(1, 1, 2, t=0), blocks(2, 1, 2, t=W), blocks(3, 1, 2, t=2 * W + 0.000001)])
    assert got[1]["cacheable_tokens"] == 0  # nothing earlier
    assert got[2]["cacheable_tokens"] == 200  # exactly W later: still seen
    assert got[3]["cacheable_tokens"] == 0  # W + 1 us after the most recent use


def test_each_use_refreshes_the_window() -> None:
    # Request 2 is 3000 s after 1, request 3 is 3000 s after 2 but 6000 s after 1.
    got = run([blocks(1, 7, t=0), blocks(2, 7, t=3000), blocks(3, 7, t=6000)])
    assert [got[i]["seen_blocks"] for i in (1, 2, 3)] == [0, 1, 1]
    # A use refreshes even when it was not itself seen (here: after a gap > W).
    got = run([blocks(1, 7, t=0), blocks(2, 7, t=5000), blocks(3, 7, t=8000)])
    assert [got[i]["seen_blocks"] for i in (1, 2, 3)] == [0, 0, 1]


def test_leading_run_only_and_capped_by_prompt() -> None:
    got = run(
        [
            blocks(1, 1, 2, 3, t=0),
            blocks(2, 1, 9, 3, t=1),  # block 3 is seen but not in the leading run
            blocks(3, 1, 2, 3, t=2, prompt_tokens=250),  # 3 blocks seen, prompt 250
        ]
    )
    assert got[2]["seen_blocks"] == 1 and got[2]["cacheable_tokens"] == 100
    assert got[3]["seen_blocks"] == 3 and got[3]["cacheable_tokens"] == 250


def test_ties_break_by_arrival_order() -> None:
    records = [blocks(2, 5, t=10), blocks(1, 5, t=10)]  # equal ts, rows out of order
    got = run(records)
    assert got[1]["cacheable_tokens"] == 0  # arrived first: nothing before it
    assert got[2]["cacheable_tokens"] == 100  # same ts, later id: seen, gap 0 <= W
    got0 = run(records, window_s=0)
    assert got0[2]["cacheable_tokens"] == 100


def test_a_block_repeated_within_a_request_is_not_seen_by_itself() -> None:
    got = run([blocks(1, 4, 4, t=0), blocks(2, 4, 4, t=1)])
    assert got[1]["seen_blocks"] == 0
    assert got[2]["seen_blocks"] == 2


def test_reuse_across_services_of_one_model_not_across_models() -> None:
    got = run(
        [
            blocks(1, 1, 2, t=0, service="assistant", model="m1"),
            blocks(2, 1, 2, t=1, service="search", model="m1"),
            blocks(3, 1, 2, t=2, service="assistant", model="m2"),
        ]
    )
    assert got[2]["cacheable_tokens"] == 200
    assert got[3]["cacheable_tokens"] == 0


def test_prefix_hash_is_one_block_of_prefix_tokens() -> None:
    def prefix(i: int, key: int, t: float, prompt: int, **kw: Any) -> Record:
        return record(
            id=i, ts_us=round(t * S), prompt_tokens=prompt, prefix_key=key, prefix_tokens=300, **kw
        )

    got = run(
        [
            prefix(1, 7, 0, 1000),
            prefix(2, 7, 1, 1000),
            prefix(3, 7, 2, 200),  # capped by its prompt
            prefix(4, 8, 3, 1000),  # another prefix
            blocks(5, 7, t=4),  # a block hash never matches a prefix key
            # Blocks with a prefix_hash: measured on blocks, the prefix is carried.
            blocks(6, 50, t=5, prefix_key=9, prefix_tokens=300),
            prefix(7, 9, 6, 1000),
            prefix(8, 7, W + 3, 1000),  # expired: last use of key 7 at t=2
        ]
    )
    assert [got[i]["cacheable_tokens"] for i in range(1, 9)] == [0, 300, 200, 0, 0, 0, 300, 0]
    assert got[1]["fingerprinted"] and got[1]["first_key_is_prefix"]
    assert got[6]["first_key"] == 50 and got[6]["first_key_is_prefix"] is False


def test_unfingerprinted_requests() -> None:
    got = run(
        [
            record(id=1, ts_us=0, prompt_tokens=1000, cached_tokens=900),
            blocks(2, t=1, prompt_tokens=1000),  # empty block_hashes: none
        ]
    )
    for i in (1, 2):
        assert not got[i]["fingerprinted"]
        assert got[i]["cacheable_tokens"] == 0 and not got[i]["is_rewarm"]
        assert got[i]["first_key"] is None


# --- rewarms ---------------------------------------------------------------------


def test_rewarm_threshold_128_tokens_or_10_percent() -> None:
    def pair(cacheable_blocks: int, cached: int) -> bool:
        hashes = list(range(cacheable_blocks))
        got = run(
            [
                blocks(1, *hashes, t=0, replica="r1"),
                blocks(2, *hashes, t=1, replica="r1", cached_tokens=cached),
            ]
        )
        assert got[2]["rewarm_tokens"] == max(0, 100 * cacheable_blocks - cached)
        return bool(got[2]["is_rewarm"])

    assert pair(10, 1000 - 127) is False  # 127 < 128
    assert pair(10, 1000 - 128) is True  # 128 >= max(128, 100)
    assert pair(50, 5000 - 499) is False  # 499 < 500 = 10%
    assert pair(50, 5000 - 500) is True
    assert pair(1, 0) is False  # 100 tokens: under 128 whatever the share


def _cause(records: list[Record], i: int) -> str | None:
    row = run(records)[i]
    assert row["is_rewarm"] == (row["rewarm_cause"] is not None)
    return row["rewarm_cause"]


def test_cause_concurrent_uses_the_earlier_requests_own_ttft() -> None:
    a = blocks(1, 1, 2, t=0, replica="r1", ttft_ms=2000.0)
    assert _cause([a, blocks(2, 1, 2, t=1.999, replica="r1")], 2) == "concurrent"
    assert _cause([a, blocks(2, 1, 2, t=2.0, replica="r1")], 2) == "eviction"  # not < ttft
    null_ttft = blocks(1, 1, 2, t=0, replica="r1")
    assert _cause([null_ttft, blocks(2, 1, 2, t=0, replica="r1")], 2) == "eviction"
    # Only the most recent earlier request counts: 3 is not in prefill any more.
    assert (
        _cause(
            [
                blocks(1, 1, 2, t=0, replica="r1", ttft_ms=10_000.0),
                blocks(3, 1, 2, t=5, replica="r2", ttft_ms=100.0),
                blocks(4, 1, 2, t=6, replica="r2"),
            ],
            4,
        )
        == "eviction"
    )


def test_cause_routing_eviction_unknown() -> None:
    a = blocks(1, 1, 2, t=0, replica="r1")
    assert _cause([a, blocks(2, 1, 2, t=10, replica="r2")], 2) == "routing"
    assert _cause([a, blocks(2, 1, 2, t=10, replica="r1")], 2) == "eviction"
    assert _cause([a, blocks(2, 1, 2, t=10)], 2) == "unknown"


def test_cause_looks_at_the_deepest_seen_block() -> None:
    records = [
        blocks(1, 1, 2, 3, t=0, replica="r1"),
        blocks(2, 1, 2, t=1, replica="r2"),  # r2 had blocks 1, 2 only
        blocks(3, 1, 2, 3, t=2, replica="r2"),
    ]
    assert _cause(records, 3) == "routing"


def test_cause_replica_history_must_be_within_w() -> None:
    records = [
        blocks(1, 1, 2, t=0, replica="r1"),
        blocks(2, 1, 2, t=3000, replica="r2"),  # keeps the block seen
        blocks(3, 1, 2, t=4000, replica="r1"),  # r1 had it 4000 s ago: > W
    ]
    assert _cause(records, 3) == "routing"


# --- rewarm causes with a caching profile (contract sections 4 and 4a) ---------------
#
# Each record carries its profile as the caller resolves it: `min_prompt_tokens`
# and `ttl_s`. Request 1 warms blocks 1, 2 (200 tokens) on r1 with no ttft, so
# without a profile a later miss on r1 is `eviction`: each case below changes one
# thing and shows which cause takes over.


def warm(**fields: Any) -> Record:
    return blocks(1, 1, 2, t=0, replica="r1", **fields)


def test_cause_below_minimum() -> None:
    # 200 tokens, below a minimum of 201: the provider caches none of it.
    assert _cause([warm(), blocks(2, 1, 2, t=10, replica="r1", min_prompt_tokens=201)], 2) == (
        "below_minimum"
    )
    # At the minimum it is cached, so the miss is the replica's.
    assert _cause([warm(), blocks(2, 1, 2, t=10, replica="r1", min_prompt_tokens=200)], 2) == (
        "eviction"
    )
    for none in (None, 0):  # no minimum
        miss = blocks(2, 1, 2, t=10, replica="r1", min_prompt_tokens=none)
        assert _cause([warm(), miss], 2) == "eviction"
    # Only r's own prompt and minimum count, not the earlier request's.
    short_warm = warm(min_prompt_tokens=10_000)
    assert _cause([short_warm, blocks(2, 1, 2, t=10, replica="r1")], 2) == "eviction"


def test_cause_expiry_is_strictly_more_than_the_ttl() -> None:
    def miss(t: float, ttl_s: float | None) -> Record:
        return blocks(2, 1, 2, t=t, replica="r1", ttl_s=ttl_s)

    assert _cause([warm(), miss(300.000001, 300.0)], 2) == "expiry"  # 1 us more
    assert _cause([warm(), miss(300, 300.0)], 2) == "eviction"  # exactly the TTL: not more
    assert _cause([warm(), miss(3000, None)], 2) == "eviction"  # no TTL
    # A TTL that is not a whole number of microseconds: 0.3 s is more than it.
    assert _cause([warm(), miss(0.3, 0.2999995)], 2) == "expiry"
    assert _cause([warm(), miss(0.3, 0.3)], 2) == "eviction"
    # A TTL longer than W never expires a seen block (seen: at most W old).
    assert _cause([warm(), miss(W, 2 * W)], 2) == "eviction"
    # r's TTL counts, not the earlier request's.
    assert _cause([warm(ttl_s=1.0), miss(10, None)], 2) == "eviction"


def test_cause_expiry_looks_at_the_most_recent_carrier_of_the_deepest_block() -> None:
    records = [
        blocks(1, 1, 2, 3, t=0, replica="r1"),
        blocks(2, 1, 2, t=250, replica="r1"),  # refreshes blocks 1, 2, not 3
        blocks(3, 1, 2, 3, t=400, replica="r1", ttl_s=300.0),  # block 3: 400 s old
        blocks(4, 1, 2, t=500, replica="r1", ttl_s=300.0),  # block 2: 250 s old
    ]
    assert _cause(records, 3) == "expiry"
    assert _cause(records, 4) == "eviction"
    # The carrier on another replica refreshes it too (the provider's cache is one).
    other = [blocks(1, 1, 2, t=0, replica="r1"), blocks(2, 1, 2, t=250, replica="r2")]
    assert _cause([*other, blocks(3, 1, 2, t=400, replica="r1", ttl_s=300.0)], 3) == "eviction"


def test_below_minimum_comes_before_concurrent() -> None:
    in_prefill = warm(ttft_ms=5000.0)  # r comes 1 s later: still in prefill
    assert _cause([in_prefill, blocks(2, 1, 2, t=1, replica="r1")], 2) == "concurrent"
    short = blocks(2, 1, 2, t=1, replica="r1", min_prompt_tokens=1024)
    assert _cause([in_prefill, short], 2) == "below_minimum"


def test_concurrent_comes_before_expiry() -> None:
    expired = blocks(2, 1, 2, t=2, replica="r1", ttl_s=1.0)  # 2 s > 1 s
    assert _cause([warm(), expired], 2) == "expiry"
    assert _cause([warm(ttft_ms=5000.0), expired], 2) == "concurrent"


def test_below_minimum_comes_before_expiry() -> None:
    both = blocks(2, 1, 2, t=400, replica="r1", ttl_s=300.0, min_prompt_tokens=1024)
    assert _cause([warm(), both], 2) == "below_minimum"


def test_expiry_comes_before_routing_eviction_and_unknown() -> None:
    def miss(replica: str | None, ttl_s: float | None) -> Record:
        return blocks(2, 1, 2, t=400, replica=replica, ttl_s=ttl_s)

    # Warmed only on r1, asked on r2: routing without a TTL, expiry with one.
    assert _cause([warm(), miss("r2", None)], 2) == "routing"
    assert _cause([warm(), miss("r2", 300.0)], 2) == "expiry"
    assert _cause([warm(), miss("r1", 300.0)], 2) == "expiry"  # not eviction
    assert _cause([warm(), miss(None, 300.0)], 2) == "expiry"  # not unknown
    assert _cause([warm(), miss(None, 500.0)], 2) == "unknown"  # 400 s: within the TTL


def test_profile_columns_change_causes_only() -> None:
    """A profile never changes which requests are rewarms, nor their tokens."""
    plain = [warm(), blocks(2, 1, 2, t=400, replica="r2"), blocks(3, 1, t=401, replica="r2")]
    profiled = [{**r, "min_prompt_tokens": 1024, "ttl_s": 300.0} for r in plain]
    a, b = run(plain), run(profiled)
    for i in (1, 2, 3):
        assert {k: v for k, v in a[i].items() if k != "rewarm_cause"} == {
            k: v for k, v in b[i].items() if k != "rewarm_cause"
        }
    assert [b[i]["rewarm_cause"] for i in (1, 2, 3)] == [None, "below_minimum", None]


# --- history rewrite ---------------------------------------------------------------


def _rewrites(records: list[Record]) -> list[bool]:
    got = run(records)
    return [got[r["id"]]["history_rewrite"] for r in records]


def test_history_append_is_not_a_rewrite_and_first_request_never_is() -> None:
    turn1 = blocks(1, *range(10), t=0, session_id="s")
    turn2 = blocks(2, *range(12), t=1, session_id="s")
    assert _rewrites([turn1, turn2]) == [False, False]
    got = run([turn1, turn2])
    assert got[1]["is_opening"] and not got[2]["is_opening"]


def test_history_rewrite_with_ten_percent_slack() -> None:
    prev = blocks(1, *range(10), t=0, session_id="s")  # 10 full blocks
    keep9 = blocks(2, *range(9), 99, 98, t=1, session_id="s")  # 9 common: 9 >= 9
    keep8 = blocks(2, *range(8), 99, 98, t=1, session_id="s")  # 8 common: 8 < 9
    assert _rewrites([prev, keep9]) == [False, False]
    assert _rewrites([prev, keep8]) == [False, True]
    # Full blocks count floor(prompt / block_size): a partial last block is slack.
    partial = blocks(1, *range(10), t=0, session_id="s", prompt_tokens=950)  # 9 full
    keep8b = blocks(2, *range(8), 99, t=1, session_id="s")  # 8 < 8.1
    assert _rewrites([partial, keep8b]) == [False, True]


def test_history_rewrite_edge_cases() -> None:
    empty_prev = blocks(1, 5, t=0, session_id="s", prompt_tokens=50)  # 0 full blocks
    assert _rewrites([empty_prev, blocks(2, 9, t=1, session_id="s")]) == [False, False]
    no_hashes = record(id=1, ts_us=0, prompt_tokens=1000, session_id="s")
    assert _rewrites([no_hashes, blocks(2, 9, t=1, session_id="s")]) == [False, False]
    # Sessions are independent; the previous request is per session, across models.
    records = [
        blocks(1, 1, 2, 3, t=0, session_id="a"),
        blocks(2, 7, 8, 9, t=1, session_id="b"),
        blocks(3, 1, 2, 3, 4, t=2, session_id="a", model="other"),
        blocks(4, 5, 5, 5, t=3, session_id="b"),
    ]
    assert _rewrites(records) == [False, False, False, True]


# --- hits, unique prefixes ---------------------------------------------------------


def test_hit_is_at_least_half_cached() -> None:
    got = run(
        [
            record(id=1, ts_us=0, prompt_tokens=1000, cached_tokens=500),
            record(id=2, ts_us=0, prompt_tokens=1000, cached_tokens=499),
            record(id=3, ts_us=0, prompt_tokens=0, cached_tokens=0),
        ]
    )
    assert [got[i]["is_hit"] for i in (1, 2, 3)] == [True, False, True]


def test_first_keys() -> None:
    records = [
        blocks(1, 1, 2, t=0),
        blocks(2, 1, 3, t=1),
        blocks(3, 2, 3, t=2),
        record(id=4, ts_us=3 * S, prompt_tokens=10, prefix_key=1, prefix_tokens=5),
        record(id=5, ts_us=4 * S, prompt_tokens=10),  # not fingerprinted
    ]
    run(records)
    frame = to_frame(records)
    results, _ = compute_request_metrics(frame, W)
    got = results.sort("id")
    # The first block of each request with blocks, the prefix key of one without:
    # what the prefix rollups count distinct (tests/rollups/test_aggregate.py).
    assert got["first_key"].to_list()[:3] == [got["first_key"][0]] * 2 + [got["first_key"][2]]
    assert got["first_key"][0] != got["first_key"][2]
    assert got["first_key_is_prefix"].to_list() == [False, False, False, True, None]
    assert got["fingerprinted"].to_list() == [True, True, True, True, False]
    assert got["first_key"][4] is None


def test_unbounded_window() -> None:
    got = run([blocks(1, 1, t=0), blocks(2, 1, t=10**6)], window_s=math.inf)
    assert got[2]["cacheable_tokens"] == 100


# --- API behaviour -----------------------------------------------------------------


def test_late_records_are_refused_with_a_plan() -> None:
    first = to_frame([blocks(1, 1, t=5000, session_id="s"), blocks(2, 1, t=9000)])
    _, state = compute_request_metrics(first, W)
    late = to_frame([blocks(3, 1, t=8000)])
    plan = plan_recompute(state, late)
    assert plan is not None
    assert plan.late_from_ts_us == 8000 * S
    assert plan.reload_from_ts_us == (8000 - 3600) * S
    assert plan.seed_sessions == ("s",)  # its last request (t=5000) is after the reload start
    with pytest.raises(LateRecordsError) as err:
        compute_request_metrics(late, W, state)
    assert err.value.plan == plan
    assert plan_recompute(state, to_frame([blocks(4, 1, t=9000)])) is None  # equal ts, later id
    assert plan_recompute(state, to_frame([blocks(1, 1, t=9000)])) is not None  # earlier id


def test_state_round_trip_and_window_check() -> None:
    records = [
        blocks(1, 1, 2, t=0, replica="r1", ttft_ms=12.5, session_id="s"),
        blocks(2, 1, 3, t=1, replica=None),
        record(id=3, ts_us=2 * S, prompt_tokens=10, prefix_key=-5, prefix_tokens=5),
    ]
    _, state = compute_request_metrics(to_frame(records), W)
    back = ReuseState.from_bytes(state.to_bytes())
    assert back.window_us == state.window_us and back.watermark == state.watermark == (2 * S, 3)
    assert back.entries.equals(state.entries) and back.sessions.equals(state.sessions)
    assert state.entries.height == 5  # (1, r1), (2, r1), (1, null), (3, null), prefix -5
    with pytest.raises(ValueError):
        compute_request_metrics(to_frame([blocks(9, 1, t=5)]), 60.0, state)
    with pytest.raises(ValueError):
        ReuseState.from_bytes(b"junk")


def test_state_is_pruned_to_the_window() -> None:
    _, state = compute_request_metrics(to_frame([blocks(1, 1, t=0), blocks(2, 2, t=100)]), 50.0)
    assert state.entries["key"].to_list() == [2]
    _, state = compute_request_metrics(to_frame([blocks(1, 1, t=0), blocks(2, 2, t=50)]), 50.0)
    assert sorted(state.entries["key"].to_list()) == [1, 2]  # exactly W old: kept


def test_empty_frame_and_missing_optional_columns() -> None:
    results, state = compute_request_metrics(to_frame([]), W)
    assert results.height == 0 and state.watermark is None
    minimal = pl.DataFrame(
        {"id": [1, 2], "ts_us": [0, 1], "model": ["m", "m"], "prompt_tokens": [10, 10]}
    )
    results, _ = compute_request_metrics(minimal, W)
    assert results["fingerprinted"].to_list() == [False, False]
    assert results["is_hit"].to_list() == [False, False]


def test_a_state_saved_before_the_sessions_model_loads_and_knows_no_switch() -> None:
    """A state written before sessions kept their model: it loads with the model
    null, and the session's next request (on any model) is no switch."""
    first = [blocks(1, 1, 2, t=0, session_id="s", model="a")]
    _, state = compute_request_metrics(to_frame(first), W)
    old = dataclasses.replace(state, sessions=state.sessions.drop("model"))
    back = ReuseState.from_bytes(old.to_bytes())
    assert back.sessions["model"].to_list() == [None]
    then = [blocks(2, 1, 2, t=5, session_id="s", model="b")]
    results, _ = compute_request_metrics(to_frame(then), W, back)
    assert results["session_model_changed"].to_list() == [False]
    switched, _ = compute_request_metrics(to_frame(then), W, state)
    assert switched["session_model_changed"].to_list() == [True]
