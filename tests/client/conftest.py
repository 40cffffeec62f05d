"""The `providers` fixture: one fake OpenAI + Anthropic server per test module,
reset before each test."""

from collections.abc import Iterator

import pytest

from tests.client.fake_providers import FakeProviders, fake_providers


@pytest.fixture(scope="module")
def providers_server() -> Iterator[FakeProviders]:
    with fake_providers() as fake:
        yield fake


@pytest.fixture
def providers(providers_server: FakeProviders) -> FakeProviders:
    providers_server.reset()
    return providers_server
