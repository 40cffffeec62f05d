"""The capacity curve on hand-checked sequences (the property tests compare it to
an OrderedDict LRU on random ones)."""

from __future__ import annotations

import pytest

from service.analytics import capacity_curve
from tests.analytics.reference import record, to_frame

S = 1_000_000


def _req(i: int, *hashes: int, model: str = "m", block_size: int = 10) -> dict[str, object]:
    return record(
        id=i,
        ts_us=i * S,
        model=model,
        prompt_tokens=block_size * len(hashes),
        block_size=block_size,
        block_hashes=list(hashes),
    )


def test_lru_by_hand() -> None:
    # a b a c b: with 1 block nothing is ever resident again; with 2, the second
    # "a" hits (b, a resident), "b" misses (a, c evicted b); with 3 both hit.
    frame = to_frame([_req(1, 1), _req(2, 2), _req(3, 1), _req(4, 3), _req(5, 2)])
    curve = capacity_curve(frame, [0, 10, 19, 20, 30, 10**9])
    assert curve.block_size == 10
    assert [p.hit_rate for p in curve.points] == [0.0, 0.0, 0.0, 0.2, 0.4, 0.4]
    assert curve.ceiling == 0.4


def test_hit_is_checked_before_the_request_touches_its_blocks() -> None:
    # Request 2 touches 3 new blocks after block 1; with 2 blocks, block 1 is
    # resident when request 2 starts, though its own later blocks evict it.
    frame = to_frame([_req(1, 1), _req(2, 1, 5, 6, 7), _req(3, 1)])
    curve = capacity_curve(frame, [20])
    assert curve.points[0].hit_rate == pytest.approx(10 / 60)


def test_leading_run_and_models_apart() -> None:
    frame = to_frame(
        [
            _req(1, 1, 2, 3),
            _req(2, 1, 9, 3),  # only the leading block counts
            _req(3, 1, 2, 3, model="other"),  # another model: cold
        ]
    )
    curve = capacity_curve(frame, [10**6])
    assert curve.points[0].hit_rate == pytest.approx(10 / 90)


def test_only_requests_with_block_hashes_and_most_common_block_size() -> None:
    records = [
        _req(1, 1, 2),
        _req(2, 1, 2),
        _req(3, 1, 2, block_size=100),  # its own size for its tokens
        record(id=4, ts_us=4 * S, prompt_tokens=500, prefix_key=1, prefix_tokens=500),
    ]
    curve = capacity_curve(to_frame(records), [20])
    assert curve.block_size == 10  # 2 of 3 requests: capacity 20 tokens = 2 blocks
    assert curve.points[0].hit_rate == pytest.approx((20 + 200) / (20 + 20 + 200))


def test_no_blocks() -> None:
    curve = capacity_curve(to_frame([record(id=1, ts_us=0, prompt_tokens=10)]), [100])
    assert curve.block_size is None and curve.ceiling is None
    assert curve.points[0].hit_rate is None
