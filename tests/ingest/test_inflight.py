"""The memory budget's accounting (service/ingest/inflight.py): charges add up and
are given back, Busy when others hold the budget, 413 when one request alone would
pass it, and the estimate of dense JSON."""

import orjson
import pytest
from pydantic import ValidationError

from service.ingest import inflight
from service.ingest.body import BodyTooLarge
from service.settings import MiB, Settings


def test_charges_add_up_and_are_given_back_whole() -> None:
    budget = inflight.Budget(100)
    with inflight.reserving(budget) as mine:
        mine.charge(30)
        mine.charge_decoding(2)  # DECODE_FACTOR per decoded byte
        mine.charge_inflated(1)  # and one more for the inflated byte itself
        assert mine.held == budget.held == 30 + 2 * inflight.DECODE_FACTOR + 1 + 10
    assert budget.held == 0
    inflight.UNMETERED.charge(10**12)  # outside a request: nothing to charge
    inflight.UNMETERED.charge_json_values(b"[" + b"[]," * 1000 + b"[]]")
    assert inflight.UNMETERED.held == 0


def test_busy_while_others_hold_the_budget_too_large_when_alone_past_it() -> None:
    budget = inflight.Budget(100)
    other = inflight.Reservation(budget)
    other.charge(60)
    with inflight.reserving(budget) as mine:
        mine.charge(40)
        with pytest.raises(inflight.Busy):
            mine.charge(1)
        assert mine.held == 40 and budget.held == 100
    with pytest.raises(BodyTooLarge), inflight.reserving(budget) as mine:
        mine.charge(101)
    other.release()
    assert budget.held == 0


def test_json_dense_in_separators_costs_more_than_records_of_usual_shapes() -> None:
    record = orjson.dumps(
        {
            "request_id": "r-000000001",
            "ts": 1_714_564_800,
            "service": "assistant",
            "model": "m",
            "prompt_tokens": 1,
            "block_size": 512,
            "block_hashes": list(range(1000, 1016)),
        }
    )
    small = b'{"request_id":"r1","ts":1714564800,"service":"s","model":"m","prompt_tokens":1}'
    for usual in (record, small, b"[" + b",".join([small] * 100) + b"]"):
        assert inflight.json_values_cost(usual) <= inflight.DECODE_FACTOR * len(usual)
    dense = b"[" + b"[[[]]]," * 1000 + b"[]]"
    assert inflight.json_values_cost(dense) > 40 * len(dense)


def test_settings_refuse_a_budget_one_body_at_the_limits_would_pass() -> None:
    assert Settings().max_inflight_bytes >= inflight.most_one_body_holds(10 * MiB, 64 * MiB)
    with pytest.raises(ValidationError, match="max_inflight_bytes"):
        Settings(max_inflight_bytes=512 * MiB)
    Settings(max_inflight_bytes=512 * MiB, max_decompressed_bytes=32 * MiB)
