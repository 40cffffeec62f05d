"""Fixtures of the client's tests and of the lab's client test: the fake providers
(one server for the run, reset before each test) and a real `cachewatch serve`
(one for the run, on a fresh SQLite database, jobs off, with an admin token),
whose stored records a test reads back from its database (no endpoint lists raw
records). Tests sharing it keep apart by their records' ids and service names."""

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from sqlalchemy import Engine, create_engine, select
from sqlalchemy.orm import Session

from service.models import UsageRecord
from service.services.tokens import Scope, create_token
from tests.client.fake_providers import FakeProviders, fake_providers
from tests.conftest import LiveServer, fresh_database_url, make_live_server


@pytest.fixture(scope="session")
def providers_server() -> Iterator[FakeProviders]:
    with fake_providers() as fake:
        yield fake


@pytest.fixture
def providers(providers_server: FakeProviders) -> FakeProviders:
    providers_server.reset()
    return providers_server


@dataclass
class Cachewatch:
    server: LiveServer
    token: str
    engine: Engine

    @property
    def url(self) -> str:
        return self.server.url

    def rows(self, service: str) -> list[UsageRecord]:
        """Every record stored for `service`, in arrival order."""
        with Session(self.engine) as session:
            query = select(UsageRecord).where(UsageRecord.service == service)
            return list(session.scalars(query.order_by(UsageRecord.id)).all())


@pytest.fixture(scope="session")
def cachewatch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cachewatch]:
    folder = tmp_path_factory.mktemp("cachewatch")
    server = make_live_server(folder, fresh_database_url(folder, "client"), run_jobs="false")
    server.start()  # `cachewatch serve` migrates the database first
    engine = create_engine(server.database_url)
    try:
        with Session(engine) as session:
            token = create_token(session, Scope("admin"), "client-test")
            session.commit()
        yield Cachewatch(server, token, engine)
    finally:
        engine.dispose()
        server.stop()
