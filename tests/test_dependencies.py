"""Every third-party module the service imports comes with its base install: a
module reachable only through a dev or optional dependency fails at import on a
deployment (pyarrow, reached only through chdb, once did for a ClickHouse server
over HTTP). Exceptions: `chdb` itself (the `clickhouse` extra, imported only for a
`chdb:///` URL) and `service/lab/` (`make lab`, a development tool)."""

import ast
import re
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, packages_distributions, requires
from pathlib import Path

import pytest

from tests.conftest import is_postgres_run

pytestmark = pytest.mark.skipif(is_postgres_run(), reason="touches no database: run once")
ROOT = Path(__file__).resolve().parent.parent
FIRST_PARTY = {"service", "dashboards"}
OPTIONAL = {"chdb"}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def base_closure() -> set[str]:
    """The base dependencies and everything they require (extras left out)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    todo = [_name(r) for r in project["dependencies"]]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            needed = requires(name) or []
        except PackageNotFoundError:
            continue
        todo += [_name(r) for r in needed if "extra ==" not in r]
    return seen


def imported_tops(path: Path) -> set[str]:
    tops = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            tops |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            tops.add(node.module.split(".")[0])
    return tops - set(sys.stdlib_module_names) - FIRST_PARTY - OPTIONAL


def test_every_import_of_the_service_is_in_its_base_install() -> None:
    installed = base_closure()
    distributions = packages_distributions()
    missing = {
        f"{path.relative_to(ROOT)}: {top}"
        for path in (ROOT / "service").rglob("*.py")
        if "lab" not in path.relative_to(ROOT / "service").parts
        for top in imported_tops(path)
        if not {_name(d) for d in distributions.get(top, [top])} & installed
    }
    assert not missing, sorted(missing)
