"""Two `cachewatch detect` processes at once on PostgreSQL create each regression once."""

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from sqlalchemy import func, select

from service import migrate
from service.db import make_engine, make_sessionmaker
from service.models import Regression
from service.settings import Settings
from service.simulate import detection_week, simulate
from tests.conftest import PROJECT_ROOT, drop_database, fresh_database_url, is_postgres_run
from tests.simulated import load_records


@pytest.mark.skipif(not is_postgres_run(), reason="advisory locks: the PostgreSQL pass runs this")
def test_two_detect_processes_create_each_regression_once(
    tmp_path: Path, database_url: str
) -> None:
    week = detection_week(3, days=3.0, problems=("noop_deploy", "prefix"))
    result = simulate(week.scenario, 3)
    url = fresh_database_url(tmp_path, "detect")
    engine = make_engine(Settings(database_url=url))
    try:
        migrate.upgrade(engine)
        with make_sessionmaker(engine).begin() as session:
            load_records(session, result.records, result.events)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEWATCH_")}
        env["CACHEWATCH_DATABASE_URL"] = url
        command = [sys.executable, "-m", "service.cli", "detect", "--json"]
        runs = [
            subprocess.Popen(
                command, env=env, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            for _ in range(2)
        ]
        outputs = [run.communicate(timeout=600) for run in runs]
        assert [run.returncode for run in runs] == [0, 0], [o[1][-2000:] for o in outputs]
        reported = [orjson.loads(out) for out, _ in outputs]
        with engine.connect() as conn:
            stored = conn.execute(select(Regression.id, Regression.cause)).all()
            assert conn.scalar(select(func.count()).select_from(Regression)) == len(stored)
        assert len(stored) == len(week.regressions) >= 1
        # Both processes saw the same regressions: one created them, the other updated them.
        assert (
            {r["id"] for r in reported[0]}
            == {r["id"] for r in reported[1]}
            == {row.id for row in stored}
        )
    finally:
        engine.dispose()
        drop_database(url)
