"""docker-compose.yml and the Dockerfile: valid for docker-compose, the services
the docs promise, and commands the image can actually run."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from service.cli import app as cli_app
from tests.conftest import PROJECT_ROOT, skip_or_fail

COMPOSE_FILE = PROJECT_ROOT / "docker-compose.yml"
#: Added on top of COMPOSE_FILE for the records in ClickHouse.
CLICKHOUSE_FILE = PROJECT_ROOT / "docker-compose.clickhouse.yml"
DOCKERFILE = PROJECT_ROOT / "Dockerfile"
#: The services that run until stopped: each must come back after a crash or reboot.
LONG_RUNNING = ("postgres", "api", "worker", "clickhouse")


def docker_compose() -> str:
    found = shutil.which("docker-compose")
    if found is None:
        skip_or_fail("docker-compose is not installed (Debian: docker-compose)")
    return str(found)


def run_compose(
    *args: str, files: tuple[Path, ...] = (COMPOSE_FILE,)
) -> subprocess.CompletedProcess[str]:
    # A clean environment: no COMPOSE_* or CACHEWATCH_* from the caller changes the file.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPOSE_", "CACHEWATCH_"))}
    chosen = [part for file in files for part in ("-f", str(file))]
    return subprocess.run(
        [docker_compose(), *chosen, *args],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    """The file as docker-compose resolves it (anchors, defaults, short syntax)."""
    return resolved_config((COMPOSE_FILE,))


@pytest.fixture(scope="module")
def compose_clickhouse() -> dict[str, Any]:
    """docker-compose.yml with docker-compose.clickhouse.yml on top, resolved."""
    return resolved_config((COMPOSE_FILE, CLICKHOUSE_FILE))


def resolved_config(files: tuple[Path, ...]) -> dict[str, Any]:
    as_json = run_compose("config", "--format", "json", files=files)  # Compose v2
    # v1 answers an unknown option with its help text and exit status 0.
    if as_json.returncode == 0 and as_json.stdout.lstrip().startswith("{"):
        config: dict[str, Any] = json.loads(as_json.stdout)
        return config
    # Compose v1 (Debian 12) prints YAML only; it is a Python program that always
    # has PyYAML, which this venv lacks: its own interpreter converts the output.
    resolved = run_compose("config", files=files)
    assert resolved.returncode == 0, resolved.stderr
    interpreter = Path(docker_compose()).read_text().splitlines()[0].removeprefix("#!").strip()
    converted = subprocess.run(
        [
            *interpreter.split(),
            "-c",
            "import json, sys, yaml; json.dump(yaml.safe_load(sys.stdin), sys.stdout)",
        ],
        input=resolved.stdout,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert converted.returncode == 0, converted.stderr
    config = json.loads(converted.stdout)
    return config


@pytest.mark.parametrize(
    "files", [(COMPOSE_FILE,), (COMPOSE_FILE, CLICKHOUSE_FILE)], ids=["postgres", "clickhouse"]
)
def test_compose_file_validates(files: tuple[Path, ...]) -> None:
    validated = run_compose("config", "-q", files=files)
    assert validated.returncode == 0, validated.stderr
    assert validated.stdout == ""


def test_postgres_service(compose: dict[str, Any]) -> None:
    postgres = compose["services"]["postgres"]
    assert postgres["image"] == "postgres:16"
    # The data lives in a named volume declared at the top level, so it survives
    # `docker-compose down` and container rebuilds.
    targets = {_volume_source_target(v) for v in postgres.get("volumes", [])}
    assert ("pgdata", "/var/lib/postgresql/data") in targets, postgres.get("volumes")
    assert "pgdata" in compose.get("volumes", {})
    test = postgres["healthcheck"]["test"]
    assert any("pg_isready" in part for part in test), test


def test_api_service(compose: dict[str, Any]) -> None:
    api = compose["services"]["api"]
    build = api["build"]
    context = Path(build["context"] if isinstance(build, dict) else build)
    dockerfile = build.get("dockerfile", "Dockerfile") if isinstance(build, dict) else "Dockerfile"
    assert (context / dockerfile).resolve() == DOCKERFILE.resolve()
    assert api["command"][:2] == ["cachewatch", "serve"], api["command"]
    assert "0.0.0.0" in api["command"], "inside a container the API must listen beyond loopback"
    url = api["environment"]["CACHEWATCH_DATABASE_URL"]
    assert url.startswith("postgresql+psycopg://") and "@postgres:" in url, url
    assert api["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert any("/healthz" in part for part in api["healthcheck"]["test"])


def test_worker_service(compose: dict[str, Any]) -> None:
    worker = compose["services"]["worker"]
    assert worker["build"] == compose["services"]["api"]["build"]  # the same image
    assert worker["command"][0] == "cachewatch"
    assert (
        worker["environment"]["CACHEWATCH_DATABASE_URL"]
        == (compose["services"]["api"]["environment"]["CACHEWATCH_DATABASE_URL"])
    )
    assert "postgres" in worker["depends_on"]


def test_every_compose_command_is_a_real_cli_command(compose: dict[str, Any]) -> None:
    """A typo or a command not written yet would only show when the container starts."""
    for name, service in compose["services"].items():
        command = service.get("command")
        if not command or command[0] != "cachewatch":
            continue
        subcommand = [part for part in command[1:] if not part.startswith("-")][:1]
        answer = CliRunner().invoke(cli_app, [*subcommand, "--help"])
        assert answer.exit_code == 0, (
            f"service {name} runs `cachewatch {subcommand[0]}`: {answer.output.strip()}"
        )


def test_dockerfile_installs_the_console_script_and_its_files() -> None:
    text = DOCKERFILE.read_text()
    assert text.startswith("FROM python:3.11"), "the project targets Python 3.11"
    # The migrations are package data under service/: no alembic.ini or migrations/
    # beside the package is needed (test_installed_package_finds_its_migrations).
    for needed in ("pyproject.toml", "clients", "service", "dashboards"):
        assert any(
            line.startswith(("COPY", "ADD")) and needed in line for line in text.splitlines()
        ), f"the image lacks {needed}"
    assert "pip install" in text
    assert '"cachewatch", "serve"' in text


def test_installed_package_finds_its_migrations(tmp_path: Path) -> None:
    """The image installs the package into site-packages (`pip install .`, not
    editable) and runs the console script from a folder holding no alembic.ini or
    migrations/. Reproduced here: `cachewatch migrate` must work in that layout, or
    `cachewatch serve` dies at start in every container. (tests/clickhouse/
    test_wheel.py does the same with the built wheel and a ClickHouse server.)"""
    site_packages, app_dir = tmp_path / "site-packages", tmp_path / "app"
    shutil.copytree(
        PROJECT_ROOT / "service",
        site_packages / "service",
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    app_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEWATCH_")}
    env["CACHEWATCH_DATABASE_URL"] = f"sqlite:///{tmp_path / 'image.db'}"
    # Like the console script: the installed package first on sys.path, not the cwd.
    script = (
        f"import sys; sys.path[0] = {str(site_packages)!r}; "
        "import service; assert service.__file__.startswith(sys.path[0]), service.__file__; "
        "from service.cli import app; app(['migrate'])"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=app_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-1000:]


def _volume_source_target(volume: Any) -> tuple[str, str]:
    if isinstance(volume, dict):
        return str(volume.get("source")), str(volume.get("target"))
    source, target, *_ = str(volume).split(":")
    return source, target


def test_clickhouse_service(compose: dict[str, Any], compose_clickhouse: dict[str, Any]) -> None:
    """ClickHouse comes with docker-compose.clickhouse.yml: the API and the worker
    point at it and start once it answers (they create its tables on start: before,
    they started beside a server still booting and the API answered every POST 500).
    Without the second file the records stay in PostgreSQL and nothing waits for it."""
    assert "clickhouse" not in compose["services"]
    for name in ("api", "worker"):
        assert compose["services"][name]["environment"]["CACHEWATCH_CLICKHOUSE_URL"] == ""
    services = compose_clickhouse["services"]
    clickhouse = services["clickhouse"]
    assert clickhouse["image"].startswith("clickhouse/clickhouse-server:")
    assert "profiles" not in clickhouse
    targets = {_volume_source_target(v) for v in clickhouse.get("volumes", [])}
    assert ("chdata", "/var/lib/clickhouse") in targets
    assert "chdata" in compose_clickhouse.get("volumes", {})
    assert any("/ping" in part for part in clickhouse["healthcheck"]["test"])
    user, password = (
        clickhouse["environment"][k] for k in ("CLICKHOUSE_USER", "CLICKHOUSE_PASSWORD")
    )
    database = clickhouse["environment"]["CLICKHOUSE_DB"]
    for name in ("api", "worker"):
        url = services[name]["environment"]["CACHEWATCH_CLICKHOUSE_URL"]
        assert url == f"http://{user}:{password}@clickhouse:8123/{database}", url
        assert services[name]["depends_on"]["clickhouse"]["condition"] == "service_healthy"
        assert services[name]["depends_on"]["postgres"]["condition"] == "service_healthy"
        # The second file adds to the first: the rest of the service is unchanged.
        assert services[name]["command"] == compose["services"][name]["command"]


@pytest.mark.parametrize("variant", ["compose", "compose_clickhouse"])
def test_every_dependency_waits_for_a_healthcheck(
    variant: str, request: pytest.FixtureRequest
) -> None:
    """`service_started` only waits for the container to exist: PostgreSQL still
    recovering or ClickHouse still booting would fail the migrations at start."""
    services = request.getfixturevalue(variant)["services"]
    for name, service in services.items():
        for needed, how in service.get("depends_on", {}).items():
            assert how["condition"] == "service_healthy", (name, needed, how)
            test = services[needed]["healthcheck"]["test"]
            assert test and test != ["NONE"], (needed, test)


@pytest.mark.parametrize("variant", ["compose", "compose_clickhouse"])
def test_long_running_services_restart(variant: str, request: pytest.FixtureRequest) -> None:
    """A crashed worker stops detection and alerts silently: each service comes back
    after a crash or a reboot of the Docker host, unless stopped on purpose."""
    services = request.getfixturevalue(variant)["services"]
    for name in LONG_RUNNING:
        if name in services:
            assert services[name].get("restart") == "unless-stopped", name


def test_the_jobs_run_in_the_worker(compose: dict[str, Any]) -> None:
    """The layout of docs/deployment.md: the API replica serves, the worker runs the
    analytics pass, detection, alerts and retention (docs/dashboard.md counts on it)."""
    services = compose["services"]
    assert services["api"]["environment"]["CACHEWATCH_RUN_JOBS"] == "false"
    assert services["worker"]["command"] == ["cachewatch", "worker"]
    assert "CACHEWATCH_RUN_JOBS" not in services["worker"]["environment"]
