"""The fingerprint tests touch no database: they run once, in the SQLite run."""

from pathlib import Path

import pytest

from tests.conftest import is_postgres_run

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if not is_postgres_run():
        return
    once = pytest.mark.skip(reason="touches no database: run once")
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(once)
