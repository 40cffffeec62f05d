"""The adversarial run's stalls, against a real `cachewatch serve` with its background
jobs on: one record with an extreme `ts`, or one huge array of events, and the
service keeps answering everyone else."""

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import pytest

from tests.conftest import LiveServer, drop_database, fresh_database_url, make_live_server


@pytest.fixture
def busy_server(tmp_path: Path) -> Iterator[LiveServer]:
    """A server whose analytics pass runs every second (the default is 30 s)."""
    url = fresh_database_url(tmp_path, "stall")
    server = make_live_server(tmp_path, url, analytics_interval_s="1")
    server.start()
    yield server
    server.stop()
    drop_database(url)


def record(request_id: str, ts: object) -> bytes:
    return orjson.dumps(
        {"request_id": request_id, "ts": ts, "service": "s", "model": "m", "prompt_tokens": 10}
    )


def otlp_span(start_ns: int) -> bytes:
    attributes = [
        {"key": "gen_ai.request.model", "value": {"stringValue": "m"}},
        {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "10"}},
    ]
    span = {"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "chat",
            "startTimeUnixNano": str(start_ns), "endTimeUnixNano": str(start_ns),
            "attributes": attributes}  # fmt: skip
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "s"}}]}
    return orjson.dumps(
        {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": [span]}]}]}
    )


def test_an_extreme_ts_neither_stalls_the_service_nor_is_accepted(
    busy_server: LiveServer,
) -> None:
    """Before: after `ts: 0` the pass rebuilt 20,000 days for a minute and more, and
    `/healthz` and every ingest answered 503 meanwhile; year 1 and an OTLP start of
    2^64-1 ns were accepted and wedged it for longer; then `GET /v1/metrics` was a
    400 at every bucket size."""
    ingest = {"Authorization": f"Bearer {busy_server.token('ingest')}"}
    read = {"Authorization": f"Bearer {busy_server.token('read')}"}
    with httpx.Client(base_url=busy_server.url, timeout=30) as http:
        assert (
            http.post("/v1/usage", content=record("now", time.time()), headers=ingest).json()[
                "accepted"
            ]
            == 1
        )
        time.sleep(1.5)  # the pass has counted it
        body = b"\n".join(
            [
                record("epoch", 0),  # accepted: a late record from 1970
                record("year-1", "0001-01-01T00:00:00Z"),
                record("year-9999", "9999-12-31T23:59:59-14:00"),
                record("ns-max", 2**64 - 1),
                record("next-week", time.time() + 7 * 86_400),
            ]
        )
        answer = http.post("/v1/usage", content=body, headers=ingest).json()
        assert (answer["accepted"], answer["rejected"]) == (1, 4), answer
        reasons = [e["error"] for e in answer["errors"]]
        assert "year must be from 1970 to 2099" in reasons[0]
        assert "ts must be before 2100" in reasons[2]
        assert "after the server's clock" in reasons[3]
        otlp = http.post(
            "/v1/otlp/v1/traces",
            content=otlp_span(2**64 - 1),
            headers={**ingest, "Content-Type": "application/json"},
        ).json()
        assert otlp["partialSuccess"]["rejectedSpans"] == "1"

        # The passes that count the 1970 record run meanwhile: nobody waits on them.
        deadline = time.monotonic() + 8
        i = 0
        while time.monotonic() < deadline:
            started = time.monotonic()
            assert http.get("/healthz").status_code == 200
            fresh = http.post("/v1/usage", content=record(f"n{i}", time.time()), headers=ingest)
            assert fresh.status_code == 200, fresh.text
            assert time.monotonic() - started < 3
            i += 1
            time.sleep(0.2)
        for bucket in ("1m", "1h", "1d"):
            started = time.monotonic()
            metrics = http.get("/v1/metrics", params={"bucket": bucket}, headers=read)
            assert metrics.status_code == 200, metrics.text
            assert time.monotonic() - started < 5
            assert metrics.json()["totals"]["requests"] == 2 + i
            assert metrics.json()["buckets"][0]["ts"] == "1970-01-01T00:00:00Z"


def test_a_huge_events_array_does_not_block_ingest(busy_server: LiveServer) -> None:
    """Before: 120,000 events (9 MiB) ran as one 40 s transaction and each of 6
    concurrent usage posts answered 503."""
    ingest = {"Authorization": f"Bearer {busy_server.token('ingest')}"}
    events = orjson.dumps(
        [
            {"ts": 1_764_399_600 + i, "service": "s", "kind": "note", "description": f"n{i}"}
            for i in range(120_000)
        ]
    )
    statuses: list[int] = []

    def post_usage(n: int) -> None:
        with httpx.Client(base_url=busy_server.url, timeout=60) as http:
            answer = http.post("/v1/usage", content=record(f"u{n}", time.time()), headers=ingest)
            statuses.append(answer.status_code)

    with httpx.Client(base_url=busy_server.url, timeout=120) as http:
        threads = [threading.Thread(target=post_usage, args=(n,)) for n in range(6)]
        big = threading.Thread(
            target=lambda: statuses.append(
                http.post("/v1/events", content=events, headers=ingest).status_code
            )
        )
        big.start()
        time.sleep(0.3)
        for thread in threads:
            thread.start()
        for thread in [big, *threads]:
            thread.join(120)
    assert sorted(statuses) == [200] * 6 + [413]
