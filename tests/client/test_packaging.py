"""The client's distribution (clients/python, `cachewatch-client`): its version is
the service's, which pins it; and `pip install ./clients/python` into a fresh venv
gives a working client that needs nothing but httpx.

The fresh venv sees httpx and its dependencies from this venv through a .pth file
(nothing downloaded for them; and only them: not this venv's own, editable,
`cachewatch_client`). The client is built without build isolation, offline, when a
setuptools that reads its PEP 639 `license` (77 and later) can be had from this
venv; else the fresh venv's pip builds it as a user's would, fetching setuptools
for the isolated build from the package index.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, distribution, version
from pathlib import Path

import pytest

import cachewatch_client
from tests.conftest import PROJECT_ROOT, is_postgres_run

pytestmark = pytest.mark.skipif(is_postgres_run(), reason="touches no database: run once")

CLIENT = PROJECT_ROOT / "clients" / "python"
#: The first setuptools that reads `license = "Apache-2.0"` (PEP 639), as in
#: tests/clickhouse/test_wheel.py.
SETUPTOOLS_SPDX = (77,)
#: What the installed client may require: httpx alone (clients/python/pyproject.toml).
ONLY_DEPENDENCY = "httpx"


def project(path: Path) -> dict[str, object]:
    table: dict[str, object] = tomllib.loads(path.read_text())["project"]
    return table


def requirement_name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    assert match, requirement
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def test_the_client_version_is_the_services_and_pinned() -> None:
    service, client = project(PROJECT_ROOT / "pyproject.toml"), project(CLIENT / "pyproject.toml")
    source = (CLIENT / "src" / "cachewatch_client" / "_version.py").read_text()
    match = re.search(r'^__version__ = "([^"]+)"$', source, re.MULTILINE)
    assert match, "no __version__ in _version.py"
    assert client["name"] == "cachewatch-client"
    assert match.group(1) == client["version"] == service["version"]
    assert cachewatch_client.__version__ == service["version"]
    dependencies = service["dependencies"]
    assert isinstance(dependencies, list)
    pins = [d for d in dependencies if requirement_name(d) == "cachewatch-client"]
    assert pins == [f"cachewatch-client=={service['version']}"]


def run(
    command: list[str | Path], cwd: Path | None = None, env: dict[str, str] | None = None
) -> str:
    done = subprocess.run(
        [str(c) for c in command], cwd=cwd, env=env, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, f"{command}: {done.stdout[-2000:]}{done.stderr[-3000:]}"
    return done.stdout


def link_distributions(folder: Path, names: list[str]) -> list[str]:
    """Symbolic links in `folder` to the files of these distributions of this venv
    and of everything they require (their extras left out); the names linked."""
    folder.mkdir()
    seen: list[str] = []
    todo = list(names)
    while todo:
        name = requirement_name(todo.pop())
        if name in seen:
            continue
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue  # a marker-guarded requirement, not installed here
        seen.append(name)
        todo += [r for r in dist.requires or () if "extra ==" not in r]
        tops = {Path(str(f)).parts[0] for f in dist.files or () if not str(f).startswith("..")}
        for top in tops - {"__pycache__"}:
            target = Path(str(dist.locate_file(top)))
            if target.exists() and not (folder / top).exists():
                (folder / top).symlink_to(target)
    return seen


def _setuptools_version() -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in version("setuptools").split(".")[:1])
    except (PackageNotFoundError, ValueError):
        return (0,)


#: The script run in the fresh venv: the client imports from there, instruments an
#: httpx client, fingerprints a request; what its installed metadata says.
CHECK = """
import importlib.metadata, json, sys
import httpx
import cachewatch_client
from cachewatch_client.fingerprint import fingerprint

client = httpx.Client()
assert cachewatch_client.instrument(client) is client
fields = fingerprint({
    "model": "gpt-4o",
    "messages": [
        {"role": "system", "content": "You are terse. " * 100},
        {"role": "user", "content": "hello"},
    ],
})
dist = importlib.metadata.distribution("cachewatch-client")
print(json.dumps({
    "file": cachewatch_client.__file__,
    "version": cachewatch_client.__version__,
    "dist": str(dist.locate_file("")),
    "requires": dist.requires,
    "fields": sorted(fields),
    "prefix_tokens": fields.get("prefix_tokens"),
    "prefix": sys.prefix,
}))
"""


def test_pip_install_into_a_fresh_venv(tmp_path: Path) -> None:
    # A copy of the source folder: the build leaves no build/ or egg-info in the checkout.
    source = tmp_path / "cachewatch-client"
    shutil.copytree(CLIENT, source, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv])  # with pip (ensurepip: no download)
    python = venv / "bin" / "python"
    assert (venv / "bin" / "pip").exists()

    offline = _setuptools_version() >= SETUPTOOLS_SPDX
    outer = tmp_path / "outer"
    linked = link_distributions(outer, [ONLY_DEPENDENCY, *(["setuptools"] if offline else [])])
    assert ONLY_DEPENDENCY in linked
    assert "cachewatch-client" not in linked
    purelib = run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    (Path(purelib.strip()) / "outer.pth").write_text(f"{outer}\n")

    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("CACHEWATCH_", "PYTHON", "VIRTUAL_ENV"))
    }
    pip: list[str | Path] = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    if offline:
        # The fresh venv's own setuptools (ensurepip's, on Python 3.11) would come
        # first on its path and may be too old: this venv's is used.
        run([python, "-m", "pip", "uninstall", "-q", "-y", "setuptools"], env=env)
        pip += ["--no-build-isolation", "--no-index"]
    run([*pip, source], cwd=tmp_path, env=env)

    elsewhere = tmp_path / "elsewhere"  # no source folder beside the script
    elsewhere.mkdir()
    found = json.loads(run([python, "-c", CHECK], cwd=elsewhere, env=env).strip())
    assert Path(found["file"]).is_relative_to(venv), found["file"]
    assert Path(found["dist"]).is_relative_to(venv), found["dist"]
    assert found["version"] == cachewatch_client.__version__
    assert {"block_hashes", "prefix_hash", "prefix_tokens"} <= set(found["fields"])
    assert found["prefix_tokens"] > 0
    requires = found["requires"] or []
    assert [requirement_name(r) for r in requires] == [ONLY_DEPENDENCY], requires
