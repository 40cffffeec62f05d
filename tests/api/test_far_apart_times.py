"""Data far apart in time (one record from 1970 beside today's): the work of the
analytics pass and of a read follows the data, not the span of time it covers, and
what a read caught up is kept whatever the read answers."""

import time
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service import repository
from service.services import analytics_pass, chart_rollups
from service.services.series import MAX_BUCKETS

NOW_S = 1_764_399_600  # 2025-11-29T07:00:00Z


def record(request_id: str, ts: Any, **extra: Any) -> dict[str, Any]:
    return {"request_id": request_id, "ts": ts, "service": "s", "model": "m",
            "prompt_tokens": 1000, "cached_tokens": 500, **extra}  # fmt: skip


def post(client: TestClient, headers: dict[str, str], records: list[dict[str, Any]]) -> Any:
    body = b"\n".join(orjson.dumps(r) for r in records)
    answer = client.post("/v1/usage", content=body, headers=headers)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_the_pass_rebuilds_only_the_days_with_data(
    client: TestClient,
    ingest_headers: dict[str, str],
    session: Session,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: every day between 1970 and now was rebuilt (20,000 days, minutes of
    CPU, the service answering 503 meanwhile)."""
    post(client, ingest_headers, [record("now", NOW_S)])
    rebuilt: list[tuple[int, int]] = []
    real = chart_rollups._rebuild

    def spy(session: Session, from_us: int, end_us: int, to_us: int | None = None) -> None:
        rebuilt.append((from_us // 86_400_000_000 * 86_400_000_000, end_us))
        real(session, from_us, end_us, to_us)

    monkeypatch.setattr(chart_rollups, "_rebuild", spy)
    settings = client.app.state.settings  # type: ignore[attr-defined]
    analytics_pass.catch_up(session, settings)
    post(client, ingest_headers, [record("epoch", 0)])  # late: a recompute from 1970
    started = time.perf_counter()
    analytics_pass.catch_up(session, settings)
    assert time.perf_counter() - started < 10
    today = (NOW_S // 86_400) * 86_400 * 1_000_000
    day = 86_400 * 1_000_000
    # The forward pass; the late one's own day (its hours, not every later day).
    assert rebuilt == [(today, today + day), (0, day)]
    chart_rollups.rebuild_from(session, None)  # a full rebuild: the two days, in one batch
    assert rebuilt[2:] == [(0, today + day)]


def test_metrics_without_a_range_count_the_buckets_that_hold_data(
    client: TestClient, ingest_headers: dict[str, str], read_headers: dict[str, str]
) -> None:
    """Before: 400, "20,789 buckets with data" for the two that hold data."""
    post(client, ingest_headers, [record("now", NOW_S), record("epoch", 0)])
    for bucket in ("1m", "5m", "1h", "1d"):
        answer = client.get("/v1/metrics", params={"bucket": bucket}, headers=read_headers)
        assert answer.status_code == 200, answer.text
        buckets = answer.json()["buckets"]
        assert [b["requests"] for b in buckets] == [1, 1]
        assert buckets[0]["ts"] == "1970-01-01T00:00:00Z"


def test_more_buckets_with_data_than_the_limit_is_a_400(
    client: TestClient, ingest_headers: dict[str, str], read_headers: dict[str, str]
) -> None:
    minutes = [record(f"m{i}", NOW_S - 60 * i) for i in range(MAX_BUCKETS + 1)]
    post(client, ingest_headers, minutes)
    answer = client.get("/v1/metrics", params={"bucket": "1m"}, headers=read_headers)
    assert answer.status_code == 400
    assert "more than 10,080 buckets with data" in answer.json()["detail"]
    assert client.get("/v1/metrics", params={"bucket": "5m"}, headers=read_headers).is_success
    bounded = {"bucket": "1m", "from": NOW_S - 60 * (MAX_BUCKETS - 1)}
    assert client.get("/v1/metrics", params=bounded, headers=read_headers).is_success


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/v1/metrics", {"bucket": "7s"}),  # 422 from the route itself
        ("/dashboard/data/series", {"bucket": "7s"}),
        ("/dashboard/data/tables", {"from": "yesterday"}),
    ],
)
def test_a_refused_read_keeps_the_catch_up_it_did(
    client: TestClient,
    ingest_headers: dict[str, str],
    read_headers: dict[str, str],
    session: Session,
    path: str,
    params: dict[str, str],
) -> None:
    """Before: the read's error rolled its catch-up back, so the next read redid it."""
    post(client, ingest_headers, [record(f"r{i}", NOW_S + i) for i in range(3)])
    answer = client.get(path, params=params, headers=read_headers)
    assert answer.status_code == 422, answer.text
    assert repository.get_cursor(session, analytics_pass.CURSOR) == repository.max_usage_id(session)
