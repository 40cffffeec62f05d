"""cachewatch_client.fingerprint (the package): the standard library only, and the
client around it the standard library and httpx only, so an application that
installs the client pulls in none of the server's dependencies."""

import ast
import json
import sys

from tests.client.fingerprint.helpers import ROOT, run_python

PACKAGE = ROOT / "clients" / "python" / "src" / "cachewatch_client"
SERVER_ONLY = ("pydantic", "numpy", "sqlalchemy", "polars", "typer", "fastapi", "orjson")


def test_the_fingerprint_modules_import_only_the_standard_library() -> None:
    for path in sorted((PACKAGE / "fingerprint").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                tops = {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = {node.module.split(".")[0]}
            else:
                continue
            assert tops <= sys.stdlib_module_names | {"__future__"}, (path.name, tops)


def test_importing_the_client_loads_no_server_dependency() -> None:
    code = """
import json, sys
before = set(sys.modules)
import cachewatch_client
added = {m.split(".")[0] for m in set(sys.modules) - before}
print(json.dumps(sorted(added)))
"""
    added = set(json.loads(run_python(code, "-I")))
    assert "cachewatch_client" in added, added  # the import did happen here
    assert not added & set(SERVER_ONLY), sorted(added & set(SERVER_ONLY))
    assert "service" not in added
