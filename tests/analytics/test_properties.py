"""Property tests: the vectorized code against the naive reference on random
small traffic (few models, replicas and sessions, tiny hash alphabets so reuse
happens, ts ties, null ttft and replica, prefix-hash requests, caching profiles
with random minimums and TTLs on either side of W and of the gaps)."""

from __future__ import annotations

import itertools
import math
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, Phase, find, given, settings
from hypothesis import strategies as st

from service.analytics import (
    ReuseState,
    _arrays,
    capacity_curve,
    compute_request_metrics,
    plan_from,
    plan_recompute,
)
from service.analytics import sessions as sessions_module
from service.analytics.definitions import CAUSES
from tests.analytics.reference import Record, lru_hit_rate, record, request_metrics, to_frame

S = 1_000_000
WINDOWS = st.sampled_from([0.0, 1.0, 2.5, 4.0, 3600.0, math.inf])
#: Profile minimums against prompts of 0..3000 tokens (None and 0: no minimum).
#: Half the records have none, so that the later causes stay common.
MINIMUMS = st.one_of(st.none(), st.sampled_from([0, 100, 1024, 2500]))
#: TTLs below, at and above the gaps (multiples of 0.3 s and 1 s) and the windows;
#: 0.2999995 s is not a whole microsecond (a gap of 0.3 s is more than it).
TTLS = st.one_of(st.none(), st.sampled_from([0.0, 0.2999995, 0.3, 0.7, 1.0, 2.0, 3.7, 5.0, 3600.0]))
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def traffic(draw: st.DrawFn, max_size: int = 24, min_size: int = 1) -> list[Record]:
    """Records in arrival (id) order; ts are not monotone in id, so the order by
    (ts, id) differs from arrival and equal ts are common."""
    n = draw(st.integers(min_size, max_size))
    out: list[Record] = []
    for i in range(n):
        shape = draw(st.sampled_from(["blocks", "blocks", "blocks", "prefix", "both", "none"]))
        hashes: list[int] | None = None
        if shape in ("blocks", "both"):
            if out and draw(st.booleans()):
                # Continue an earlier request: appends and near-appends happen.
                base = draw(st.sampled_from(out))["block_hashes"] or []
                keep = draw(st.integers(0, len(base)))
                hashes = base[:keep] + draw(st.lists(st.integers(0, 3), max_size=3))
            else:
                hashes = draw(st.lists(st.integers(0, 3), max_size=6))
        prompt = draw(st.integers(0, 3000))
        fields: dict[str, Any] = {
            "id": 10 + 3 * i,
            "ts_us": draw(st.integers(0, 8)) * S + draw(st.sampled_from([0, 0, 300_000])),
            "service": draw(st.sampled_from(["a", "b"])),
            "model": draw(st.sampled_from(["m", "m", "n"])),
            "prompt_tokens": prompt,
            "cached_tokens": draw(st.integers(0, prompt)),
            "ttft_ms": draw(st.sampled_from([None, 0.0, 100.0, 700.0, 2500.0])),
            "replica": draw(st.sampled_from([None, "r1", "r2", "r3"])),
            "session_id": draw(st.sampled_from([None, "s1", "s2"])),
            "block_size": draw(st.sampled_from([1, 100, 128, 512, None]))
            if hashes is not None
            else None,
            "block_hashes": hashes,
            "min_prompt_tokens": draw(MINIMUMS),
            "ttl_s": draw(TTLS),
        }
        if shape in ("prefix", "both"):
            fields["prefix_key"] = draw(st.integers(0, 3))
            fields["prefix_tokens"] = draw(st.sampled_from([None, 0, 200, 900]))
        out.append(record(**fields))
    return out


@pytest.mark.parametrize("cause", CAUSES)
def test_traffic_reaches_every_cause(cause: str) -> None:
    """The comparisons below cover each cause: random traffic finds every one."""

    def has_cause(drawn: tuple[list[Record], float]) -> bool:
        records, window_s = drawn
        return any(v["rewarm_cause"] == cause for v in request_metrics(records, window_s).values())

    once = settings(max_examples=500, database=None, phases=[Phase.generate])  # no shrinking
    find(st.tuples(traffic(), WINDOWS), has_cause, settings=once)


def _by_id(results: pl.DataFrame) -> dict[int, dict[str, Any]]:
    return {row["id"]: row for row in results.to_dicts()}


@SETTINGS
@given(traffic(), WINDOWS)
def test_single_pass_equals_reference(records: list[Record], window_s: float) -> None:
    results, _ = compute_request_metrics(to_frame(records), window_s)
    assert results["id"].to_list() == [r["id"] for r in sorted(records, key=_order)]
    assert _by_id(results) == request_metrics(records, window_s)


@settings(SETTINGS, max_examples=100)
@given(traffic(), WINDOWS)
def test_chunked_and_large_input_paths_equal_reference(
    records: list[Record], window_s: float
) -> None:
    """The paths only big inputs take (Polars sort with its stability check,
    chunked comparisons), forced on small ones by shrinking their thresholds."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_arrays, "_CHUNK", 3)
        patch.setattr(_arrays, "_SMALL_SORT", 0)
        patch.setattr(sessions_module, "_COMPARE_CHUNK", 2)
        results, _ = compute_request_metrics(to_frame(records), window_s)
    assert _by_id(results) == request_metrics(records, window_s)


def _order(r: Record) -> tuple[int, int]:
    return (r["ts_us"], r["id"])


def _canonical(state: ReuseState) -> tuple[object, ...]:
    return (
        state.watermark,
        state.entries.sort(pl.all()).to_dicts(),
        state.sessions.sort(pl.all()).to_dicts(),
    )


@SETTINGS
@given(traffic(max_size=30), WINDOWS, st.data())
def test_batches_with_late_records_equal_single_pass(
    records: list[Record], window_s: float, data: st.DataObject
) -> None:
    """Batches in arrival order; a batch with late records goes through the
    recompute path, with the caller's reload simulated over the 'database'."""
    whole, whole_state = compute_request_metrics(to_frame(records), window_s)
    cuts = data.draw(st.sets(st.integers(1, max(1, len(records) - 1)), max_size=6))
    bounds = [0, *sorted(c for c in cuts if c < len(records)), len(records)]
    state: ReuseState | None = None
    stored: dict[int, dict[str, Any]] = {}
    for lo, hi in itertools.pairwise(bounds):
        database, batch = records[:hi], to_frame(records[lo:hi])
        plan = plan_recompute(state, batch)
        if plan is None:
            results, state = compute_request_metrics(batch, window_s, state)
        else:
            assert state is not None
            if data.draw(st.booleans()):
                # A caller rebuilding whole 3 s buckets starts at a bucket boundary.
                plan = plan_from(state, plan.late_from_ts_us // (3 * S) * (3 * S))
            start = plan.reload_from_ts_us
            reload = [r for r in database if start is None or r["ts_us"] >= start]
            for session in plan.seed_sessions:
                assert start is not None
                before = [r for r in database if r["session_id"] == session and r["ts_us"] < start]
                if before:
                    reload.append(max(before, key=_order))
            results, state = compute_request_metrics(to_frame(reload), window_s, state.rewind(plan))
            results = plan.keep(results)
        stored.update(_by_id(results))
        state = ReuseState.from_bytes(state.to_bytes())
    assert stored == _by_id(whole)
    assert state is not None and _canonical(state) == _canonical(whole_state)


@settings(SETTINGS, max_examples=100)
@given(traffic(max_size=30), st.data())
def test_in_order_batches_never_need_recompute(records: list[Record], data: st.DataObject) -> None:
    records = sorted(records, key=_order)
    whole, _ = compute_request_metrics(to_frame(records), 2.5)
    size = data.draw(st.integers(2, 8))
    state = None
    parts = []
    for lo in range(0, len(records), size):
        batch = to_frame(records[lo : lo + size])
        assert plan_recompute(state, batch) is None
        results, state = compute_request_metrics(batch, 2.5, state)
        parts.append(results)
    assert pl.concat(parts).equals(whole)


@st.composite
def block_traffic(draw: st.DrawFn) -> list[Record]:
    n = draw(st.integers(1, 40))
    return [
        record(
            id=i,
            ts_us=draw(st.integers(0, 20)) * S,
            model=draw(st.sampled_from(["m", "m", "n"])),
            prompt_tokens=draw(st.integers(0, 120)),
            block_size=draw(st.sampled_from([16, 16, 16, 32])),
            block_hashes=draw(st.lists(st.integers(0, 9), min_size=1, max_size=6))
            if draw(st.integers(0, 5))
            else None,
            prefix_key=draw(st.sampled_from([None, 1])),
            prefix_tokens=50,
        )
        for i in range(n)
    ]


@SETTINGS
@given(block_traffic(), st.lists(st.integers(0, 400), min_size=1, max_size=5))
def test_capacity_curve_equals_lru_replay(records: list[Record], sizes: list[int]) -> None:
    curve = capacity_curve(to_frame(records), sizes)
    with_blocks = [r for r in records if r["block_hashes"]]
    if not with_blocks:
        assert curve.ceiling is None and curve.block_size is None
        return
    assert curve.block_size is not None
    for size, point in zip(sizes, curve.points, strict=True):
        expected = lru_hit_rate(records, size, curve.block_size)
        assert point.tokens == size
        if sum(r["prompt_tokens"] for r in with_blocks) == 0:
            assert point.hit_rate is None
        else:
            assert point.hit_rate is not None
            assert math.isclose(point.hit_rate, expected, rel_tol=1e-12, abs_tol=1e-12)
    # The ceiling is the cacheable fraction with W unbounded over the same requests.
    reference = request_metrics(with_blocks, math.inf)
    prompt = sum(r["prompt_tokens"] for r in with_blocks)
    if prompt:
        cacheable = sum(v["cacheable_tokens"] for v in reference.values())
        assert curve.ceiling is not None
        assert math.isclose(curve.ceiling, cacheable / prompt, rel_tol=1e-12)
        huge = lru_hit_rate(records, 10**9, curve.block_size)
        assert math.isclose(curve.ceiling, huge, rel_tol=1e-12)
