"""The dashboard's numbers agree with GET /v1/metrics: its time series (one series
path, `service.services.series`) bucket for bucket, and its headline, which sums
the chart rollups in the database (`service.services.dashboard.range_totals`) and reads
one service's rows when only one has data for the filters, against the API's
totals, for the range and the one before it. Model m has prices (the models file of
`priced_client`), m2 none: the dollars agree too, None where nothing was priced."""

import math
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from dashboards.plotting import plot_ts
from service.alerts.money import usd
from service.rfc3339 import us_to_rfc3339
from tests.dashboards.helpers import records

T0 = 1_764_399_600  # a whole hour
US = 1_000_000


def post(client: TestClient, headers: dict[str, str], rows: list[dict[str, Any]]) -> None:
    body = b"\n".join(orjson.dumps(r) for r in rows)
    answer = client.post("/v1/usage", content=body, headers=headers)
    assert answer.status_code == 200 and answer.json()["rejected"] == 0, answer.text


def close(expected: float | None, got: float | None) -> bool:
    if expected is None or got is None:
        return expected is got
    return math.isclose(expected, got, rel_tol=1e-9)


def headline_of(totals: dict[str, Any]) -> dict[str, Any]:
    """The headline's numbers, as /v1/metrics totals tell them."""
    return {
        "requests": totals["requests"],
        "hit_rate": totals["hit_rate"],
        "cacheable_fraction": totals["cacheable_fraction"],
        "capture_ratio": totals["capture_ratio"],
        "rewarms": totals["rewarms"]["total"],
        "spend_usd": totals["spend_usd"],
        "wasted_usd": totals["wasted_usd"],
    }


@pytest.mark.parametrize(
    ("bucket", "service", "model"),
    [
        ("5m", None, None),
        ("15m", "a", None),
        ("1h", None, "m2"),  # only service b has m2: the headline reads b's rows
        ("1h", "b", "m"),
    ],
)
def test_series_and_headline_equal_metrics(
    priced_client: TestClient,
    ingest_headers: dict[str, str],
    read_headers: dict[str, str],
    bucket: str,
    service: str | None,
    model: str | None,
) -> None:
    client = priced_client
    post(client, ingest_headers, records(400, T0, 5 * 3600, service="a", model="m"))
    post(client, ingest_headers, records(300, T0 + 600, 4 * 3600, service="b", model="m", seed=1))
    post(client, ingest_headers, records(200, T0, 5 * 3600, service="b", model="m2", seed=2))
    filters = {k: v for k, v in (("service", service), ("model", model)) if v is not None}
    # Two ranges of equal length, both with data: the headline compares them.
    middle = T0 + 3 * 3600
    view = {"from": us_to_rfc3339(middle * US), "to": us_to_rfc3339((middle + 2 * 3600) * US)}
    before = {"from": us_to_rfc3339((middle - 2 * 3600) * US), "to": view["from"]}

    answer = client.get(
        "/dashboard/data/series", params={**filters, **view, "bucket": bucket}, headers=read_headers
    )
    assert answer.status_code == 200, answer.text
    dashboard = answer.json()

    def api(window: dict[str, str]) -> dict[str, Any]:
        got = client.get(
            "/v1/metrics", params={**filters, **window, "bucket": bucket}, headers=read_headers
        )
        assert got.status_code == 200, got.text
        return dict(got.json())

    reference = api(view)
    buckets = reference["buckets"]
    assert len(buckets) > 1 and dashboard["points"] == len(buckets)
    hit_rate, ceiling = dashboard["figures"]["hit_rate"]["data"][:2]
    assert hit_rate["x"] == [plot_ts(b["ts"]) for b in buckets]
    assert hit_rate["y"] == [round(b["hit_rate"], 4) for b in buckets]
    assert ceiling["y"] == [round(b["cacheable_fraction"], 4) for b in buckets]

    cost = dashboard["figures"]["cost"]
    if model == "m2":
        assert cost is None and dashboard["notes"]["cost"].startswith("No prices for model m2")
    else:
        spend = next(t for t in cost["data"] if t["name"] == "spend")
        assert spend["y"] == [round(b["spend_usd"], 6) for b in buckets]

    for name, window in (("current", view), ("previous", before)):
        want = headline_of(api(window)["totals"])
        got = dashboard["headline"][name]
        assert want["requests"] > 0, name
        assert (want["spend_usd"] is None) == (model == "m2"), name  # m2 has no prices
        for key, value in want.items():
            assert close(value, got[key]), (name, key, value, got[key])
    wasted = reference["totals"]["wasted_usd"]
    assert dashboard["headline"]["wasted"]["value"] == usd(wasted)
