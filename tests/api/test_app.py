"""The application's start-up."""

import gc

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from service.api import app as app_module


def test_startup_moves_the_heap_out_of_the_collectors_reach(
    app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Full collections would otherwise walk every module, route and ORM object on
    each ingest burst. The freeze runs once per process, so the lifespan's call is
    counted, and the real function is checked on its own from an unfrozen heap."""
    freeze = app_module._freeze_startup_heap
    calls: list[None] = []
    monkeypatch.setattr(app_module, "_freeze_startup_heap", lambda: calls.append(None))
    with TestClient(app):
        assert calls == [None]
    gc.unfreeze()  # an earlier test may have frozen the heap: start from none
    assert gc.get_freeze_count() == 0
    freeze.__wrapped__()  # the real one, past its once-per-process cache
    assert gc.get_freeze_count() > 10_000
