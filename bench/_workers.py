"""What several benches do alike: run one of their measures in a fresh process
with another checkout's code (`--code DIR`), so its peak RSS and its imports are
its own; run the `cachewatch` command; make and drop a fresh database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any


def run_worker(script: str, code: Path, *args: str) -> dict[str, Any]:
    """`script --code CODE --worker ARGS...` in a subprocess with CODE's service on
    the path; the JSON object of its last output line."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    done = subprocess.run(
        [sys.executable, script, "--code", str(code), "--worker", *args],
        capture_output=True,
        env=env,
        cwd=code,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"worker {args} failed: {done.stderr.decode()[-2000:]}")
    return dict(json.loads(done.stdout.decode().strip().splitlines()[-1]))


def cli(code: Path, env: dict[str, str], *args: str) -> str:
    """`cachewatch ARGS...` with CODE's service and `env`; its standard output."""
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        env=env,
        cwd=code,
        capture_output=True,
        check=True,
        timeout=600,
    )
    return done.stdout.decode().strip()


def fresh_database(base: str | None, tmp: Path, label: str) -> str:
    """A new SQLite file in `tmp` (no `base`), or a new database on `base`'s server."""
    if base is None:
        return f"sqlite:///{tmp / (label + '.db')}"
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    name = f"cw_bench_{label}_{uuid.uuid4().hex[:8]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    return make_url(base).set(database=name).render_as_string(hide_password=False)


def drop_database(base: str | None, url: str) -> None:
    """What `fresh_database` made, gone."""
    if base is None:
        Path(url.removeprefix("sqlite:///")).unlink(missing_ok=True)
        return
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{make_url(url).database}" WITH (FORCE)'))
    admin.dispose()
