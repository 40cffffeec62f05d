"""The application's start-up."""

import gc

from fastapi import FastAPI
from fastapi.testclient import TestClient


def test_startup_moves_the_heap_out_of_the_collectors_reach(app: FastAPI) -> None:
    """Full collections would otherwise walk every module, route and ORM object on
    each ingest burst (service.api.app._freeze_startup_heap)."""
    with TestClient(app):
        assert gc.get_freeze_count() > 10_000
