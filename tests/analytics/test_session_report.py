"""`session_report` on its own: a model without a TTL (a self-hosted engine) has no
unread writes, one without prices null dollars, and a session spanning two models
lists both, each model's calls followed on their own."""

import polars as pl
import pytest

from service.analytics.session_report import empty_calls, session_totals


def calls(rows: list[dict[str, object]]) -> pl.DataFrame:
    base = empty_calls()
    return pl.DataFrame([{c: row.get(c) for c in base.columns} for row in rows], schema=base.schema)


def test_no_ttl_no_prices_and_two_models() -> None:
    frame = calls(
        [
            {
                "session_id": "s",
                "service": "a",
                "model": "llama",
                "ts_us": 0,
                "prompt_tokens": 100,
                "cached_tokens": 0,
                "cache_write_tokens": 100,
            },
            {
                "session_id": "s",
                "service": "a",
                "model": "claude",
                "ts_us": 1,
                "prompt_tokens": 50,
                "cached_tokens": 10,
                "cache_write_tokens": 40,
                "ttl_s": 300.0,
                "input_usd_per_mtok": 3.0,
                "write_usd_per_mtok": 3.75,
            },
            {
                "session_id": "s",
                "service": "a",
                "model": "llama",
                "ts_us": 10**10,
                "prompt_tokens": 300,
                "cached_tokens": 100,
                "cache_write_tokens": 200,
            },
        ]
    )
    [row] = session_totals(frame).to_dicts()
    assert row["models"] == ["llama", "claude"]
    assert row["requests"] == 3 and row["prompt_tokens"] == 450 and row["cached_tokens"] == 110
    # llama has no TTL: its writes are never counted unread; claude's last call's are.
    assert row["unread_write_tokens"] == 40
    assert row["unread_write_usd"] == pytest.approx(40 * 0.75 / 1e6)
    assert row["priced_requests"] == 1  # the dollars cover the priced call only


def test_no_prices_at_all_is_null_dollars() -> None:
    frame = calls(
        [
            {
                "session_id": "s",
                "service": "a",
                "model": "m",
                "ts_us": 0,
                "prompt_tokens": 10,
                "cached_tokens": 0,
                "cache_write_tokens": 10,
                "ttl_s": 300.0,
            }
        ]
    )
    [row] = session_totals(frame).to_dicts()
    assert (row["spend_usd"], row["unread_write_usd"], row["unread_write_tokens"]) == (
        None,
        None,
        10,
    )
