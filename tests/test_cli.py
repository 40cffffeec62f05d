import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select

from service.models import ApiToken
from service.services.tokens import hash_token
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
    from service.cli import regression_line
    from tests.alerts.test_message import regression

    line = regression_line(regression())
    assert line == (
        "#7 assistant/acme-70b-instruct at 2026-11-23T14:25:00Z: hit rate 71% -> 12%, "
        "cause prefix_instability, after deploy v42 (posted, lag 240 s), "
        "costs about $1,241 a day more [open]"
    )
    unpriced = regression_line(regression(cost=None, attributed_to=None))
    assert unpriced.endswith("cause prefix_instability, no change event nearby [open]")
    assert "$" not in unpriced and "cost" not in unpriced
