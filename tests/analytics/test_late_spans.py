"""Property tests of what a late record can change (`service.analytics.state`,
"What a late record can change"): on random small traffic, adding one record (the
last to arrive, at any ts) changes the per-request values of the requests within W
after it and of its session's next request only, and of the state only its
session's remembered request when it falls over W before the watermark."""

from __future__ import annotations

from typing import Any

import polars as pl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.analytics import compute_request_metrics
from service.analytics.state import late_spans
from tests.analytics.reference import Record, ordered, to_frame
from tests.analytics.test_properties import traffic

S = 1_000_000
#: Finite windows shorter and longer than the traffic's 9 s (inf: every later one).
FINITE_WINDOWS = st.sampled_from([0.0, 1.0, 2.5, 4.0])


def _values(results: pl.DataFrame) -> dict[int, tuple[Any, ...]]:
    return {row[0]: row[1:] for row in results.drop("ts_us").rows()}


def _successor_ts(records: list[Record], late: Record) -> list[int]:
    """The ts of the late record's session's next request in (ts, id) order."""
    if late["session_id"] is None:
        return []
    after = [
        r
        for r in ordered(records)
        if r["session_id"] == late["session_id"]
        and (r["ts_us"], r["id"]) > (late["ts_us"], late["id"])
    ]
    return [after[0]["ts_us"]] if after else []


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(traffic(min_size=2), FINITE_WINDOWS)
def test_a_late_record_changes_only_its_spans(records: list[Record], window_s: float) -> None:
    late, earlier = records[-1], records[:-1]
    window_us = round(window_s * S)
    before, state_before = compute_request_metrics(to_frame(earlier), window_s)
    after, state_after = compute_request_metrics(to_frame(records), window_s)
    old, new = _values(before), _values(after)
    spans = late_spans([late["ts_us"]], _successor_ts(earlier, late), window_us, 1)
    ts = {r["id"]: r["ts_us"] for r in records}
    for record_id, values in old.items():
        if new[record_id] != values:
            assert any(a <= ts[record_id] < b for a, b in spans), (record_id, spans)

    assert state_before.watermark is not None and state_after.watermark is not None
    if (late["ts_us"], late["id"]) < state_before.watermark:
        taken = state_before.with_late_sessions(to_frame([late]))
        assert taken.sessions.sort("session_id").rows() == (
            state_after.sessions.sort("session_id").rows()
        )
        if late["ts_us"] < state_before.watermark[0] - window_us:
            columns = list(state_after.entries.columns)
            assert taken.entries.sort(columns).rows() == state_after.entries.sort(columns).rows()


def test_spans_are_merged_and_bucket_aligned() -> None:
    hour = 3600 * S
    spans = late_spans([10, hour + 5, 30 * hour], [20 * hour + 7], hour, hour)
    assert spans == [(0, 3 * hour), (20 * hour, 21 * hour), (30 * hour, 32 * hour)]
