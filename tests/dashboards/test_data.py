"""The capacity panel's data request while its replay runs (in-process; the replay
is held back by a job queued before it on the replay thread)."""

import threading
import time

import orjson
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from dashboards.cache import ReplayCache
from tests.alerts.conftest import add_regression
from tests.dashboards.helpers import records

T0 = 1_764_399_600


def test_a_pending_replay_is_found_again_by_its_sample_while_records_keep_arriving(
    app: FastAPI,
    client: TestClient,
    ingest_headers: dict[str, str],
    read_headers: dict[str, str],
) -> None:
    """Keyed by the newest record id at each ask, a page on a service that stores a
    batch between two asks would start a new replay every time and never draw."""
    replays = ReplayCache()
    app.state.dashboard_replays = replays
    release = threading.Event()
    replays.submit(("held",), lambda: {"held": release.wait(30)})

    def post(batch: list[dict[str, object]]) -> None:
        body = b"\n".join(orjson.dumps(r) for r in batch)
        assert client.post("/v1/usage", content=body, headers=ingest_headers).status_code == 200

    def capacity(**params: str) -> tuple[int, dict[str, object]]:
        answer = client.get("/dashboard/data/capacity", params=params, headers=read_headers)
        return answer.status_code, answer.json()

    post(records(60, T0, 3600, service="svc"))
    status, first = capacity()
    assert status == 202 and first["pending"] is True
    sample = first["sample"]
    assert isinstance(sample, int) and sample > 0

    # A batch between two asks, within the range (a newer bucket would move the range,
    # which is another sample anyway).
    post(records(5, T0 + 60, 60, service="svc", seed=1))
    _, unpinned = capacity()
    assert unpinned["sample"] != sample  # what the page used to chase
    status, again = capacity(sample=str(sample))
    assert (status, again["pending"], again["sample"]) == (202, True, sample)

    release.set()
    deadline = time.monotonic() + 30
    while (answer := capacity(sample=str(sample)))[0] == 202:
        assert answer[1]["sample"] == sample
        assert time.monotonic() < deadline, "the replay never ended"
    status, done = answer
    assert status == 200 and done["pending"] is False
    assert done["requests"] == 60 and done["figure"] is not None


def test_a_sample_that_is_not_a_record_id_is_refused(
    client: TestClient, read_headers: dict[str, str]
) -> None:
    for bad in ("abc", "-1", "1.5", "\uff11", "9" * 30):
        answer = client.get(
            "/dashboard/data/capacity", params={"sample": bad}, headers=read_headers
        )
        assert answer.status_code == 422, bad
        assert answer.json()["detail"][0]["loc"] == ["query", "sample"]


@pytest.mark.parametrize(
    "params",
    [
        {"from": "0001-01-01T00:00:00Z", "to": "0001-01-02T00:00:00Z"},
        {"to": "0001-01-02T00:00:00Z"},
        {"from": "9999-12-31T00:00:00Z", "to": "9999-12-31T23:00:00Z"},
        {"from": "9999-12-31T00:00:00Z"},
        {"from": "1970-01-01T00:00:00+14:00", "to": "1970-01-01T10:00:00Z", "bucket": "1m"},
        {"to": "1970-01-01T00:00:00Z"},
        {"from": "2099-12-31T23:59:59-14:00"},
    ],
)
@pytest.mark.parametrize("panel", ["series", "tables", "capacity", "findings"])
def test_ranges_at_the_ends_of_time_are_answered_or_422(
    client: TestClient,
    ingest_headers: dict[str, str],
    read_headers: dict[str, str],
    panel: str,
    params: dict[str, str],
) -> None:
    """Before: 500 (`year 0 is out of range`) on both databases."""
    body = b"\n".join(orjson.dumps(r) for r in records(20, T0, 60, service="svc"))
    assert client.post("/v1/usage", content=body, headers=ingest_headers).status_code == 200
    answer = client.get(f"/dashboard/data/{panel}", params=params, headers=read_headers)
    outside = "0001" in str(params) or "9999" in str(params)
    assert answer.status_code == (422 if outside else 200), answer.text
    if outside:
        assert "year must be from 1970 to 2099" in answer.json()["detail"]


def test_the_widest_range_is_drawn(
    client: TestClient, ingest_headers: dict[str, str], read_headers: dict[str, str]
) -> None:
    body = b"\n".join(orjson.dumps(r) for r in records(20, T0, 60, service="svc"))
    assert client.post("/v1/usage", content=body, headers=ingest_headers).status_code == 200
    params = {"from": "1970-01-01T00:00:00Z", "to": "2099-12-31T23:59:59Z"}
    answer = client.get("/dashboard/data/series", params=params, headers=read_headers)
    assert answer.status_code == 200, answer.text
    view = answer.json()["view"]
    assert view["previous_from"].startswith("18")  # the range of equal length before
    assert answer.json()["points"] == 1  # one bucket holds the 20 minutes of data


def test_without_prices_the_money_says_so_and_names_the_models(
    client: TestClient, ingest_headers: dict[str, str], read_headers: dict[str, str]
) -> None:
    """Records of models without prices: the wasted card says `no prices` (not $0),
    the cost panel is drawn empty with a note naming the models, and a regression
    without a cost says `no prices` in the table."""
    rows = [
        *records(30, T0, 3600, service="svc"),
        *records(20, T0, 3600, service="svc", model="x<b>", seed=1),
    ]
    body = b"\n".join(orjson.dumps(r) for r in rows)
    assert client.post("/v1/usage", content=body, headers=ingest_headers).status_code == 200
    series = client.get("/dashboard/data/series", headers=read_headers).json()
    assert series["headline"]["wasted"] == {"value": "no prices", "delta": "", "trend": ""}
    assert series["headline"]["current"]["wasted_usd"] is None
    assert series["headline"]["current"]["spend_usd"] is None
    assert series["notes"]["cost"].startswith("No prices for models m, x<b>: their requests")
    assert series["figures"]["cost"] is None  # the note alone, no empty chart
    assert series["figures"]["hit_rate"] is not None
    narrowed = client.get("/dashboard/data/series?model=m", headers=read_headers).json()
    assert narrowed["notes"]["cost"].startswith("No prices for model m: its requests")


def test_the_regressions_table_says_what_each_costs_a_day(
    client: TestClient, session: Session, read_headers: dict[str, str]
) -> None:
    """The cost cell from the stored regression's `cost`, through the API's JSON."""
    cost = {"usd_per_day_before": 410.0, "usd_per_day_after": 1650.5, "extra_usd_per_day": 1240.5}
    add_regression(session, cost=cost)
    add_regression(session, service="other", cost=None)
    session.commit()
    params = {"from": "2026-11-23T00:00:00Z", "to": "2026-11-24T00:00:00Z"}
    tables = client.get("/dashboard/data/tables", params=params, headers=read_headers).json()
    assert {r["service"]: r["cost"] for r in tables["regressions"]} == {
        "assistant": "+$1,241/day",
        "other": "no prices",
    }
