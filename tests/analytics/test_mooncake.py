"""The published numbers of the real Mooncake traces (shared/traces/README.md),
reproduced through the pure functions, to 1e-4."""

from __future__ import annotations

import polars as pl
import pytest

from service.analytics import capacity_curve, compute_request_metrics
from service.analytics.definitions import SUM_COLUMNS, ratios
from service.rollups import aggregate

Ki = 1024
TOL = 1e-4


def _cacheable_fraction(frame: pl.DataFrame) -> float | None:
    results, _ = compute_request_metrics(frame, 3600.0)
    rows = aggregate.rollup_sums(aggregate.join_results(frame, results), 3600)
    sums = {name: rows[name].sum() for name in SUM_COLUMNS}
    return ratios(sums, ["cacheable_fraction"])["cacheable_fraction"]


def test_conversation_cacheable_fraction(conversation: pl.DataFrame) -> None:
    assert _cacheable_fraction(conversation) == pytest.approx(0.3736, abs=TOL)


def test_conversation_capacity_curve(conversation: pl.DataFrame) -> None:
    sizes = [16 * Ki, 64 * Ki, 256 * Ki, Ki * Ki, 4 * Ki * Ki, 16 * Ki * Ki]
    curve = capacity_curve(conversation, sizes)
    assert curve.block_size == 512
    assert curve.ceiling == pytest.approx(0.3736, abs=TOL)
    assert [p.tokens for p in curve.points] == sizes
    got = [p.hit_rate for p in curve.points]
    assert got == pytest.approx([0.0329, 0.0418, 0.0430, 0.0560, 0.1847, 0.3415], abs=TOL)


def test_synthetic_cacheable_fraction(synthetic: pl.DataFrame) -> None:
    assert _cacheable_fraction(synthetic) == pytest.approx(0.6512, abs=TOL)


def test_synthetic_capacity_curve(synthetic: pl.DataFrame) -> None:
    curve = capacity_curve(synthetic, [3_000_000, 16 * Ki * Ki])
    assert curve.ceiling == pytest.approx(0.6512, abs=TOL)
    assert [p.hit_rate for p in curve.points] == pytest.approx([0.3151, 0.6406], abs=TOL)


def test_conversation_in_batches_equals_one_pass(conversation: pl.DataFrame) -> None:
    """The incremental path on real traffic: 7 batches, one state round trip each."""
    from service.analytics import ReuseState

    whole, _ = compute_request_metrics(conversation, 600.0)
    state = None
    parts = []
    for batch in conversation.sort("ts_us", "id").iter_slices(conversation.height // 7 + 1):
        res, state = compute_request_metrics(batch, 600.0, state)
        state = ReuseState.from_bytes(state.to_bytes())
        parts.append(res)
    assert pl.concat(parts).equals(whole)


def test_missing_trace_skips_or_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.analytics.conftest import mooncake_frame

    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception):
        mooncake_frame("no_such_trace.jsonl")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception):
        mooncake_frame("no_such_trace.jsonl")
