"""The capacity panel's data request while its replay runs (in-process; the replay
is held back by a job queued before it on the replay thread)."""

import threading
import time

import orjson
from fastapi import FastAPI
from fastapi.testclient import TestClient

from dashboards.cache import ReplayCache
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
