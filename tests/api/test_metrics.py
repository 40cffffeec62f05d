"""/v1/metrics and /v1/capacity through HTTP: rollups, incremental passes, late
records, bucket handling."""

import random
from typing import Any

import orjson
import polars as pl
import pytest
from fastapi.testclient import TestClient

from service.analytics.definitions import CAUSES
from service.analytics.requests import compute_request_metrics
from service.ingest.records import UsageRecordIn, to_row
from service.repository import USAGE_FRAME_SCHEMA

T0 = 1_764_399_600  # a whole hour


def rec(i: int, ts: float, blocks: list[int], cached: int, **extra: Any) -> dict[str, Any]:
    return {
        "request_id": f"r{i}",
        "ts": ts,
        "service": extra.pop("service", "assistant"),
        "model": extra.pop("model", "m"),
        "prompt_tokens": extra.pop("prompt_tokens", len(blocks) * 100),
        "cached_tokens": cached,
        "block_size": 100,
        "block_hashes": blocks,
        **extra,
    }


def post(client: TestClient, headers: dict[str, str], records: list[dict[str, Any]]) -> None:
    body = b"\n".join(orjson.dumps(r) for r in records)
    answer = client.post("/v1/usage", content=body, headers=headers)
    assert answer.status_code == 200 and answer.json()["rejected"] == 0, answer.text


def get_metrics(client: TestClient, headers: dict[str, str], **params: Any) -> dict[str, Any]:
    answer = client.get("/v1/metrics", params=params, headers=headers)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_totals_and_buckets(
    client: TestClient, ingest_headers: dict[str, str], read_headers: dict[str, str]
) -> None:
    post(
        client,
        ingest_headers,
        [
            rec(1, T0, [1, 2, 3, 4], 0, replica="a", ttft_ms=400),
            rec(2, T0 + 10, [1, 2, 3, 5], 300, replica="a", ttft_ms=100),  # warm on a: hit
            rec(3, T0 + 70, [1, 2, 3, 6], 0, replica="b", ttft_ms=420),  # routing rewarm
            {
                "request_id": "plain",
                "ts": T0 + 80,
                "service": "assistant",
                "model": "m",
                "prompt_tokens": 1000,
                "cached_tokens": 0,
            },
        ],
    )
    body = get_metrics(client, read_headers, bucket="1m")
    totals = body["totals"]
    assert totals["requests"] == 4
    assert totals["prompt_tokens"] == 2200 and totals["cached_tokens"] == 300
    assert totals["hit_rate"] == pytest.approx(300 / 2200)
    assert totals["fingerprinted_requests"] == 3
    assert totals["cacheable_tokens"] == 600
    assert totals["cacheable_fraction"] == pytest.approx(600 / 1200)
    assert totals["capture_ratio"] == pytest.approx(300 / 600)
    assert totals["rewarms"] == {
        "total": 1,
        "concurrent": 0,
        "routing": 1,
        "eviction": 0,
        "unknown": 0,
        "expiry": 0,
        "below_minimum": 0,
    }
    assert totals["rewarm_tokens"] == 300
    # No caching profile names these models: no prices, so no dollars (not 0).
    assert totals["cache_write_tokens"] == 0
    assert totals["spend_usd"] is None and totals["wasted_usd"] is None
    assert totals["wasted_usd_by_cause"] == dict.fromkeys(CAUSES)
    assert totals["unique_prefix_ratio"] == pytest.approx(1 / 3)
    assert totals["replicas"] == 2
    assert totals["ttft_ms"]["hit"]["p50"] == pytest.approx(100, rel=0.01)
    assert totals["ttft_ms"]["miss"]["p95"] == pytest.approx(420, rel=0.01)
    assert [b["requests"] for b in body["buckets"]] == [2, 2]
    assert body["buckets"][0]["ts"] == "2025-11-29T07:00:00Z"


def test_filters_and_validation(
    client: TestClient, ingest_headers: dict[str, str], read_headers: dict[str, str]
) -> None:
    post(
        client,
        ingest_headers,
        [
            rec(1, T0, [1], 0),
            rec(2, T0 + 1, [1], 100, service="search"),
            rec(3, T0 + 2, [1], 0, model="other"),
        ],
    )
    assert get_metrics(client, read_headers, service="search")["totals"]["requests"] == 1
    assert get_metrics(client, read_headers, model="other")["totals"]["requests"] == 1
    # Reuse spans services of one model, never models.
    assert get_metrics(client, read_headers, service="search")["totals"]["cacheable_tokens"] == 100
    assert get_metrics(client, read_headers, model="other")["totals"]["cacheable_tokens"] == 0
    assert get_metrics(client, read_headers, to=T0)["totals"]["requests"] == 0
    for bad in ("30", "2d", "1x", "90s"):
        answer = client.get("/v1/metrics", params={"bucket": bad}, headers=read_headers)
        assert answer.status_code == 422, bad
    # A time beyond what a 64-bit microsecond column holds is refused, not a 500.
    for param in ("from", "to"):
        for huge in ("1E100", str(10**30)):
            answer = client.get("/v1/metrics", params={param: huge}, headers=read_headers)
            assert answer.status_code == 422, (param, huge, answer.text)
            answer = client.get("/v1/capacity", params={param: huge}, headers=read_headers)
            assert answer.status_code == 422, (param, huge, answer.text)
    assert client.get("/v1/metrics").status_code == 401


def test_incremental_passes_and_late_records_equal_one_pass(
    client: TestClient, ingest_headers: dict[str, str], read_headers: dict[str, str]
) -> None:
    rng = random.Random(7)
    records = []
    for i in range(400):
        prefix = rng.randrange(4)
        blocks = [prefix, 100 + prefix * 10 + rng.randrange(3), 1000 + i]
        records.append(
            rec(
                i,
                T0 + rng.uniform(0, 3 * 3600),
                blocks,
                rng.choice([0, 100, 200]),
                replica=rng.choice(["a", "b"]),
                ttft_ms=rng.uniform(50, 500),
                session_id=f"s{rng.randrange(20)}",
            )
        )
    rng.shuffle(records)  # arrival order unrelated to ts: many late records
    for start in range(0, 400, 37):
        post(client, ingest_headers, records[start : start + 37])
        get_metrics(client, read_headers)  # a pass after each batch
    incremental = get_metrics(client, read_headers, bucket="1h")["buckets"]

    # One pass over everything, in arrival order, straight through the pure functions.
    rows = [to_row(UsageRecordIn.model_validate(r), 0) for r in records]
    frame = pl.DataFrame(
        [
            {k: row[k] for k in USAGE_FRAME_SCHEMA if k != "id"} | {"id": i}
            for i, row in enumerate(rows)
        ],
        schema=USAGE_FRAME_SCHEMA,
    )
    results, _ = compute_request_metrics(frame, 3600)
    hourly = (
        frame.drop("ts_us")
        .join(results, on="id")
        .group_by((pl.col("ts_us") // 3_600_000_000).alias("hour"))
        .agg(
            pl.len().alias("requests"),
            pl.col("cacheable_tokens").sum(),
            pl.col("rewarm_tokens").sum(),
            pl.col("history_rewrite").sum().alias("history_rewrites"),
            *[(pl.col("rewarm_cause") == c).sum().alias(c) for c in CAUSES],
        )
        .sort("hour")
    )
    assert len(incremental) == hourly.height == 3
    for bucket, expected in zip(incremental, hourly.iter_rows(named=True), strict=True):
        assert bucket["requests"] == expected["requests"]
        assert bucket["cacheable_tokens"] == expected["cacheable_tokens"]
        assert bucket["rewarm_tokens"] == expected["rewarm_tokens"]
        assert bucket["history_rewrites"] == expected["history_rewrites"]
        assert {c: bucket["rewarms"][c] for c in CAUSES} == {c: expected[c] for c in CAUSES}
    assert sum(b["cacheable_tokens"] for b in incremental) > 0
    assert sum(b["rewarms"]["total"] for b in incremental) > 0


def test_capacity_endpoint(
    client: TestClient, ingest_headers: dict[str, str], read_headers: dict[str, str]
) -> None:
    post(
        client,
        ingest_headers,
        [
            rec(1, T0, [1, 2], 0),
            rec(2, T0 + 1, [3, 4], 0),
            rec(3, T0 + 2, [1, 2], 0),
        ],
    )
    answer = client.get("/v1/capacity", params={"sizes": "100,200,400"}, headers=read_headers)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["block_size"] == 100
    assert body["ceiling"] == pytest.approx(200 / 600)
    # 2 blocks of capacity: [1,2] is evicted by [3,4]; 4 blocks keep it.
    assert [p["hit_rate"] for p in body["points"]] == [0, 0, pytest.approx(200 / 600)]
    assert client.get("/v1/capacity?sizes=abc", headers=read_headers).status_code == 422
