"""The HTTP API of a ClickHouse deployment: what was accepted is in ClickHouse and
counted by the next read, a retried batch is counted as duplicates, a bad record is
kept in the relational database with its reason, and the usage table of the
relational database stays empty."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import polars as pl
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from service import migrate
from service.api.app import create_app
from service.clickhouse import clickhouse_for
from service.models import RejectedRecord, UsageRecord
from service.services.tokens import Scope, create_token
from service.settings import Settings
from tests.api.test_sessions import MODELS, RECORDS
from tests.api.test_usage import record as usage_record
from tests.conftest import drop_database, fresh_database_url


@pytest.fixture
def deployment(tmp_path: Path, settings: Settings, chdb_url: str) -> Iterator[TestClient]:
    url = fresh_database_url(tmp_path, "api")
    app = create_app(
        settings.model_copy(
            update={
                "database_url": url,
                "clickhouse_url": chdb_url,
                "clickhouse_visibility_lag_s": 0.0,
            }
        )
    )
    migrate.upgrade(app.state.engine)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client
    app.state.engine.dispose()
    drop_database(url)


def headers(client: TestClient, scope: str) -> dict[str, str]:
    with client.app.state.sessionmaker() as session:  # type: ignore[attr-defined]
        token = create_token(session, Scope(scope), "test")
        session.commit()
    return {"Authorization": f"Bearer {token}"}


def record(i: int, **extra: object) -> dict[str, object]:
    """test_usage's record, with ten blocks of which the first nine are shared."""
    blocks = {"block_size": 100, "block_hashes": [1, 2, 3, 4, 5, 6, 7, 8, 9, i + 100]}
    return usage_record(i, cached_tokens=500 + i, **{**blocks, **extra})


def test_ingest_then_read(deployment: TestClient, chdb_url: str, settings: Settings) -> None:
    ingest, read = headers(deployment, "ingest"), headers(deployment, "read")
    good = [record(i) for i in range(5)]
    body = b"\n".join(orjson.dumps(r) for r in [*good, record(9, prompt_tokens=-1), good[0]])
    first = deployment.post("/v1/usage", content=body, headers=ingest).json()
    assert (first["accepted"], first["duplicates"], first["rejected"]) == (5, 1, 1)
    again = deployment.post("/v1/usage", content=body, headers=ingest).json()
    assert (again["accepted"], again["duplicates"], again["rejected"]) == (0, 6, 1)

    metrics = deployment.get("/v1/metrics", headers=read).json()
    assert metrics["totals"]["requests"] == 5
    assert metrics["totals"]["cached_tokens"] == sum(500 + i for i in range(5))
    assert metrics["totals"]["cacheable_fraction"] == pytest.approx(4 * 900 / 5000)

    ch = clickhouse_for(settings.model_copy(update={"clickhouse_url": chdb_url}))
    assert ch is not None
    stored = ch.query("SELECT request_id FROM usage_records FINAL", {"request_id": pl.String()})
    assert sorted(stored["request_id"].to_list()) == [f"req-{i}" for i in range(5)]
    with deployment.app.state.sessionmaker() as session:  # type: ignore[attr-defined]
        assert session.scalar(select(func.count()).select_from(UsageRecord)) == 0
        reasons = session.scalars(select(RejectedRecord.reason)).all()
    assert len(reasons) == 2 and all("prompt_tokens" in r for r in reasons)


def test_sessions_read_from_clickhouse(tmp_path: Path, settings: Settings, chdb_url: str) -> None:
    """`GET /v1/sessions` of a ClickHouse deployment answers what the relational one
    does for the same records (tests/api/test_sessions.py computes it by hand)."""
    models = tmp_path / "models.toml"
    models.write_text(MODELS, encoding="utf-8")
    answers = []
    for clickhouse in (chdb_url, None):
        url = fresh_database_url(tmp_path, f"sessions{len(answers)}")
        update = {"database_url": url, "clickhouse_url": clickhouse, "models_file": models}
        app = create_app(settings.model_copy(update={**update, "clickhouse_visibility_lag_s": 0.0}))
        migrate.upgrade(app.state.engine)
        with TestClient(app, raise_server_exceptions=False) as client:
            posted = client.post("/v1/usage", json=RECORDS, headers=headers(client, "ingest"))
            assert posted.json()["accepted"] == len(RECORDS)
            answers.append(client.get("/v1/sessions", headers=headers(client, "read")).json())
        app.state.engine.dispose()
        drop_database(url)
    on_clickhouse, relational = answers
    assert [s["session_id"] for s in on_clickhouse] == ["A", "B"]
    assert on_clickhouse == relational
