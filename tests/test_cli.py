import subprocess
import sys

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
