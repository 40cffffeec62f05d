"""service.fingerprint (the package): importable with the standard library only."""

import json
import sys

from tests.fingerprint.helpers import (
    ROOT,
    run_python,
)

HEAVY = ("pydantic", "numpy", "sqlalchemy", "polars", "typer", "fastapi", "orjson", "httpx")


def test_the_module_imports_with_only_the_standard_library_on_the_path() -> None:
    """-S: no site-packages at all; only the module's own folder is added."""
    code = f"""
import importlib.util, json, sys
sys.path.insert(0, {str(ROOT / "service")!r})
assert importlib.util.find_spec("pydantic") is None, "site-packages leaked into sys.path"
import fingerprint
fields = fingerprint.fingerprint({{"model": "m", "system": "s", "messages": []}})
print(json.dumps(fields["segments"]))
"""
    out = run_python(code, "-S", "-P")
    assert json.loads(out)[0]["name"] == "system"


def test_importing_it_from_the_package_loads_no_server_dependency() -> None:
    code = f"""
import sys
import service.fingerprint
print(sorted(m for m in {HEAVY!r} if m in sys.modules))
"""
    assert run_python(code).strip() == "[]"


def test_importing_it_loads_only_the_standard_library_and_its_own_modules() -> None:
    """Every module the import adds is from the standard library, or `service` and
    `service.fingerprint*` themselves: no third-party package, no other service
    module (they may import one)."""
    code = """
import json, sys
before = set(sys.modules)
import service.fingerprint
print(json.dumps(sorted(set(sys.modules) - before)))
"""
    added = json.loads(run_python(code, "-I"))
    assert "service.fingerprint.blocks" in added, added  # the import did happen here
    ours = [m for m in added if m == "service" or m.startswith("service.")]
    assert all(
        m in ("service", "service.fingerprint") or m.startswith("service.fingerprint.")
        for m in ours
    ), ours
    others = {m.split(".")[0] for m in added} - {"service"}
    assert others <= sys.stdlib_module_names, sorted(others - sys.stdlib_module_names)
