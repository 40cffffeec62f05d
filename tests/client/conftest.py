"""The client tests' fixtures (`tests/client/fixtures.py`): the fake providers and
a real cachewatch, one of each a module."""

from tests.client.fixtures import cachewatch, providers, providers_server

__all__ = ["cachewatch", "providers", "providers_server"]
