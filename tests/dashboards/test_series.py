"""The dashboard's fast series agree with GET /v1/metrics, bucket for bucket."""

import math
from typing import Any

import numpy as np
import orjson
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from dashboards import queries
from dashboards.series import series, ttft_percentiles
from service.rollups import histogram
from service.services import analytics_pass
from service.services.metrics import MetricsQuery, metrics
from service.settings import Settings
from tests.dashboards.helpers import records

T0 = 1_764_399_600  # a whole hour
US = 1_000_000


def post(client: TestClient, headers: dict[str, str], rows: list[dict[str, Any]]) -> None:
    body = b"\n".join(orjson.dumps(r) for r in rows)
    answer = client.post("/v1/usage", content=body, headers=headers)
    assert answer.status_code == 200 and answer.json()["rejected"] == 0, answer.text


def same(expected: Any, got: Any, path: str = "") -> None:
    if isinstance(expected, dict):
        for key, value in expected.items():
            same(value, got[key], f"{path}.{key}")
    elif isinstance(expected, float) or isinstance(got, float):
        assert expected is not None and got is not None, path
        assert math.isclose(expected, got, rel_tol=1e-9), (path, expected, got)
    else:
        assert expected == got, (path, expected, got)


@pytest.mark.parametrize(
    ("grain_s", "bucket_s", "model"),
    [(60, 60, None), (60, 300, None), (60, 900, "m2"), (3600, 3600, None), (3600, 7200, "m")],
)
def test_series_equals_metrics(
    client: TestClient,
    ingest_headers: dict[str, str],
    session: Session,
    settings: Settings,
    grain_s: int,
    bucket_s: int,
    model: str | None,
) -> None:
    post(client, ingest_headers, records(500, T0, 3 * 3600, service="a", model="m"))
    post(client, ingest_headers, records(300, T0 + 600, 2 * 3600, service="b", model="m", seed=1))
    post(client, ingest_headers, records(200, T0, 3 * 3600, service="b", model="m2", seed=2))
    analytics_pass.catch_up(session, settings)
    keys = queries.series_keys(session)
    services = tuple(sorted({s for s, _ in keys}))
    models = tuple(sorted({m for _, m in keys}))
    from_us, to_us = T0 * US, (T0 + 4 * 3600) * US
    mine = series(
        session,
        grain_s=grain_s,
        bucket_s=bucket_s,
        services=services,
        models=models,
        model=model,
        from_us=from_us,
        to_us=to_us,
    )
    reference = metrics(session, MetricsQuery(None, model, from_us, to_us, bucket_s))["buckets"]
    assert len(mine) == len(reference) > 1
    for expected, got in zip(reference, mine, strict=True):
        same(expected, got)


def test_ttft_percentiles_match_the_histogram_module() -> None:
    blobs = [
        histogram.encode([10, 20, 30], [1, 5, 1]),
        histogram.encode([20, 40], [2, 2]),
        None,
        histogram.encode([500], [3]),
    ]
    out = [0, 0, 0, 1]
    got = ttft_percentiles(np.array(out), blobs)
    merged0 = (np.array([10, 20, 30, 40]), np.array([1, 7, 1, 2]))
    for q, name in ((0.5, "p50"), (0.95, "p95")):
        assert got[0][name] == histogram.percentile(*merged0, q)
        assert got[1][name] == histogram.percentile(np.array([500]), np.array([3]), q)
    assert ttft_percentiles(np.array([0]), [None]) == {}
