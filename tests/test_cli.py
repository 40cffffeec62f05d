import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from sqlalchemy import create_engine, select

from service.alerts.money import usd
from service.cli import regression_line
from service.models import ApiToken, Regression
from service.services.tokens import hash_token
from tests.alerts.test_message import regression
from tests.conftest import PROJECT_ROOT, drop_database, fresh_database_url


def test_migrate_then_token_create_prints_only_the_token(tmp_path, database_url: str) -> None:  # type: ignore[no-untyped-def]
    url = fresh_database_url(tmp_path, "cli")
    env = {"CACHEWATCH_DATABASE_URL": url, "PATH": "/usr/bin:/bin"}
    try:
        run = [sys.executable, "-m", "service.cli"]
        subprocess.run([*run, "migrate"], env=env, cwd=PROJECT_ROOT, check=True)
        out = subprocess.run(
            [*run, "token", "create", "--scope", "read", "--name", "grafana"],
            env=env,
            cwd=PROJECT_ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        token = out.strip()
        assert out == token + "\n" and token.startswith("cw_") and len(token) > 40
        engine = create_engine(url)
        with engine.connect() as conn:
            stored = conn.execute(select(ApiToken.token_hash, ApiToken.scope, ApiToken.name)).all()
        engine.dispose()
        assert stored == [(hash_token(token), "read", "grafana")]
        bad = subprocess.run(
            [*run, "token", "create", "--scope", "root", "--name", "x"],
            env=env,
            cwd=PROJECT_ROOT,
            capture_output=True,
        )
        assert bad.returncode != 0
    finally:
        drop_database(url)


BAD_MODELS_FILE = '[[model]]\nmatch = "gpt-*"\nttl_s = "5m"\n'


@pytest.mark.parametrize("command", [["detect"], ["worker"], ["serve", "--port", "1"]])
def test_a_bad_models_file_stops_the_command_naming_the_line(
    tmp_path: Path, command: list[str]
) -> None:
    """Refused before anything starts: no migration, no server, no detection pass."""
    models = tmp_path / "models.toml"
    models.write_text(BAD_MODELS_FILE, encoding="utf-8")
    env = {
        "CACHEWATCH_DATABASE_URL": f"sqlite:///{tmp_path / 'never.db'}",
        "CACHEWATCH_MODELS_FILE": str(models),
        "PATH": "/usr/bin:/bin",
    }
    run = subprocess.run(
        [sys.executable, "-m", "service.cli", *command],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2, run.stderr
    assert f"{models}, line 3: `ttl_s` = '5m' in [[model]]" in run.stderr
    assert run.stdout == ""
    assert not (tmp_path / "never.db").exists()


def test_detect_runs_with_a_good_models_file(tmp_path: Path) -> None:
    models = tmp_path / "models.toml"
    models.write_text('[[model]]\nmatch = "gpt-*"\nttl_s = 300\n', encoding="utf-8")
    url = fresh_database_url(tmp_path, "cli_models")
    env = {"CACHEWATCH_DATABASE_URL": url, "CACHEWATCH_MODELS_FILE": str(models)}
    try:
        run = [sys.executable, "-m", "service.cli"]
        subprocess.run([*run, "migrate"], env=env, cwd=PROJECT_ROOT, check=True)
        out = subprocess.run(
            [*run, "detect", "--json"],
            env=env,
            cwd=PROJECT_ROOT,
            capture_output=True,
            text=True,
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "[]"
    finally:
        drop_database(url)


def test_a_detect_line_says_what_the_regression_costs_a_day() -> None:
    line = regression_line(regression())
    assert line == (
        "#7 assistant/acme-70b-instruct at 2026-11-23T14:25:00Z: hit rate 71% -> 12%, "
        "cause prefix_instability, after deploy v42 (posted, lag 240 s), "
        "costs about $1,241 a day more [open]"
    )
    unpriced = regression_line(regression(cost=None, attributed_to=None))
    assert unpriced.endswith("cause prefix_instability, no change event nearby [open]")
    assert "$" not in unpriced and "cost" not in unpriced


def test_detect_prints_what_each_regression_costs_a_day(tmp_path: Path) -> None:
    """Priced traffic (the models file) whose cache is lost halfway: the text line
    says what the drop costs a day, `--json` carries the contract's `cost`."""
    from service.db import make_engine, make_sessionmaker
    from service.services.regressions import regression_to_json
    from service.settings import Settings
    from tests.services.traffic import MODELS_FILE, drop_traffic, store

    models = tmp_path / "models.toml"
    models.write_text(MODELS_FILE, encoding="utf-8")
    url = fresh_database_url(tmp_path, "cli_cost")
    engine = make_engine(Settings(database_url=url))
    env = {"CACHEWATCH_DATABASE_URL": url, "PATH": "/usr/bin:/bin"}
    cli = [sys.executable, "-m", "service.cli"]
    try:
        subprocess.run([*cli, "migrate"], env=env, cwd=PROJECT_ROOT, check=True)
        with make_sessionmaker(engine).begin() as session:
            store(session, drop_traffic())
        priced = {**env, "CACHEWATCH_MODELS_FILE": str(models)}
        out = subprocess.run(
            [*cli, "detect"], env=priced, cwd=PROJECT_ROOT, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stderr
        with make_sessionmaker(engine)() as session:
            stored = [regression_to_json(r) for r in session.scalars(select(Regression)).all()]
        assert len(stored) == 1 and stored[0]["cost"] is not None
        extra = stored[0]["cost"]["extra_usd_per_day"]
        assert extra > 1  # 1,440 requests a day lose 1,900 cached tokens each
        assert out.stdout == regression_line(stored[0]) + "\n"
        assert f", costs about {usd(extra)} a day more [" in out.stdout
        again = subprocess.run(
            [*cli, "detect", "--json"], env=priced, cwd=PROJECT_ROOT, capture_output=True
        )
        # Run again, detection updates the regression: `--json` prints it, cost included.
        reported = orjson.loads(again.stdout)
        assert [(r["id"], r["cost"]) for r in reported] == [(stored[0]["id"], stored[0]["cost"])]
        assert set(stored[0]["cost"]) == {
            "usd_per_day_before",
            "usd_per_day_after",
            "extra_usd_per_day",
        }
    finally:
        engine.dispose()
        drop_database(url)
