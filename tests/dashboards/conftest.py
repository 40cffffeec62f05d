"""A dashboard app whose models file prices model `m` (and no other), so that the
analytics pass gives its records dollars as the product does."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from service.api.app import create_app
from service.settings import Settings
from tests.dashboards.helpers import MODELS_FILE


@pytest.fixture
def priced_settings(tmp_path: Path, settings: Settings) -> Settings:
    path = tmp_path / "models.toml"
    path.write_text(MODELS_FILE, encoding="utf-8")
    return settings.model_copy(update={"models_file": path})


@pytest.fixture
def priced_client(
    priced_settings: Settings, session_factory: sessionmaker[Session]
) -> Iterator[TestClient]:
    app = create_app(priced_settings)
    app.state.sessionmaker = session_factory
    with TestClient(app, raise_server_exceptions=False) as client:
        yield client
