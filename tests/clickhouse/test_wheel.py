"""The built wheel carries its migrations: installed into a fresh virtualenv, its
`cachewatch migrate`, run from a folder outside the source tree, creates the
relational tables (Alembic's) and the ClickHouse tables on a real server. Before,
the ClickHouse ones were looked up beside site-packages and the Docker image
created none, so every POST of the ClickHouse deployment answered 500."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import sys
import sysconfig
import uuid
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import httpx
import pytest

from service.models import Base
from tests.conftest import PROJECT_ROOT

#: What the wheels are built from (the Dockerfile copies the same): the service's,
#: and the client's it depends on (clients/python).
SOURCES = ("pyproject.toml", "README.md", "service", "dashboards", "clients")
#: The first setuptools that reads `license = "Apache-2.0"` (PEP 639).
SETUPTOOLS_SPDX = (77,)


def run(
    command: list[str], cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{command}: {done.stderr[-2000:]}"
    return done


def build_wheels(tmp_path: Path) -> list[Path]:
    """The wheels of a copy of the sources, the client's and the service's (no
    build/ or egg-info left in the checkout). Without build isolation when this
    venv's setuptools can build the project (fast, offline); else pip's isolated
    build fetches a newer one."""
    source, out = tmp_path / "source", tmp_path / "wheels"
    source.mkdir()
    for name in SOURCES:
        path = PROJECT_ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(path, source / name)
    isolation = [] if _setuptools_version() < SETUPTOOLS_SPDX else ["--no-build-isolation"]
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation]
    run([*pip, "-w", str(out), str(source / "clients" / "python"), str(source)])
    (client,) = out.glob("cachewatch_client-*.whl")
    (service,) = out.glob("cachewatch-*.whl")
    return [client, service]


def _setuptools_version() -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in version("setuptools").split(".")[:1])
    except PackageNotFoundError:
        return (0,)


def fresh_venv(tmp_path: Path, wheels: list[Path]) -> Path:
    """A new venv holding the wheels alone; the dependencies are this venv's, seen
    through a .pth file (nothing downloaded). A .pth path line adds the folder
    only: this venv's own .pth files (the editable install of the checkout) are
    not run, so `service` can only come from the wheel."""
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    purelib = run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    (Path(purelib.stdout.strip()) / "outer.pth").write_text(sysconfig.get_path("purelib") + "\n")
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q"]
    run([*pip, "--no-deps", "--no-index", *map(str, wheels)])
    return venv


@pytest.fixture
def clickhouse_database(clickhouse_server: str) -> Iterator[str]:
    """A database name on the real server, dropped afterwards."""
    name = f"wheel_{uuid.uuid4().hex[:12]}"
    yield name
    httpx.post(clickhouse_server, content=f"DROP DATABASE IF EXISTS {name}", timeout=30)


def test_the_installed_wheel_migrates_both_databases(
    tmp_path: Path, clickhouse_server: str, clickhouse_database: str
) -> None:
    venv = fresh_venv(tmp_path, build_wheels(tmp_path))
    elsewhere = tmp_path / "elsewhere"  # no alembic.ini, no migrations/, no source
    elsewhere.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CACHEWATCH_", "PYTHON", "VIRTUAL_ENV"))
    }
    env["CACHEWATCH_DATABASE_URL"] = f"sqlite:///{tmp_path / 'relational.db'}"
    env["CACHEWATCH_CLICKHOUSE_URL"] = clickhouse_server + clickhouse_database

    for package in ("service", "cachewatch_client"):
        where = run(
            [str(venv / "bin" / "python"), "-c", f"import {package}; print({package}.__file__)"],
            cwd=elsewhere,
            env=env,
        )
        assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout
    run([str(venv / "bin" / "cachewatch"), "migrate"], cwd=elsewhere, env=env)

    relational = sqlite3.connect(tmp_path / "relational.db")
    tables = {r[0] for r in relational.execute("SELECT name FROM sqlite_master")}
    relational.close()
    assert set(Base.metadata.tables) | {"alembic_version"} <= tables

    assert clickhouse_tables(clickhouse_server, clickhouse_database) >= created_by_migrations()
    applied = clickhouse_rows(
        clickhouse_server, clickhouse_database, "SELECT name FROM schema_migrations"
    )
    shipped = {p.stem for p in (PROJECT_ROOT / "migrations/clickhouse").glob("*.sql")}
    assert set(applied) == shipped


def created_by_migrations() -> set[str]:
    """Every table and view the SQL files leave, in their order: created by a
    `CREATE ... IF NOT EXISTS name`, gone after a `DROP TABLE IF EXISTS name`."""
    statement = re.compile(
        r"^\s*(CREATE|DROP)\b[^;]*?\bIF\s+(?:NOT\s+)?EXISTS\s+(\w+)",
        re.IGNORECASE | re.MULTILINE,
    )
    names = {"schema_migrations"}
    for path in sorted((PROJECT_ROOT / "migrations/clickhouse").glob("*.sql")):
        for verb, name in statement.findall(path.read_text()):
            if verb.upper() == "DROP":
                names.discard(name)
            else:
                names.add(name)
    return names


def clickhouse_tables(base_url: str, database: str) -> set[str]:
    return set(clickhouse_rows(base_url, database, "SHOW TABLES"))


def clickhouse_rows(base_url: str, database: str, sql: str) -> list[str]:
    answer = httpx.post(base_url, params={"database": database}, content=sql, timeout=30)
    assert answer.status_code == 200, answer.text
    return answer.text.split()
