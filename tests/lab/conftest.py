"""The lab's client test (`test_client.py`) drives the lab against the client
tests' fake providers and a real cachewatch (`tests/client/fixtures.py`)."""

from tests.client.fixtures import cachewatch, providers, providers_server

__all__ = ["cachewatch", "providers", "providers_server"]
