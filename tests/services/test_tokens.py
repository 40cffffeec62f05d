"""The per-process token cache: valid tokens are looked up once per TTL, unknown
ones every time (a new token works at once), revocation takes effect at expiry."""

import asyncio

import pytest

from service.services import tokens as token_service
from service.services.tokens import Scope, TokenCache


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(token_service.time, "monotonic", clock)
    return clock


class Database:
    """What `token_scope` would answer, and how often it was asked."""

    def __init__(self, scope: Scope | None) -> None:
        self.scope = scope
        self.asked = 0

    async def look_up(self) -> Scope | None:
        self.asked += 1
        return self.scope


def ask(cache: TokenCache, token: str, database: Database) -> Scope | None:
    return asyncio.run(cache.scope(token, database.look_up))


def test_a_valid_token_is_looked_up_once_per_ttl(clock: Clock) -> None:
    cache, database = TokenCache(ttl_s=5), Database(Scope.INGEST)
    for _ in range(3):
        assert ask(cache, "cw_a", database) is Scope.INGEST
    assert database.asked == 1
    clock.now += 5.01
    assert ask(cache, "cw_a", database) is Scope.INGEST
    assert database.asked == 2


def test_a_revoked_token_stops_working_when_its_entry_expires(clock: Clock) -> None:
    cache, database = TokenCache(ttl_s=5), Database(Scope.READ)
    assert ask(cache, "cw_a", database) is Scope.READ
    database.scope = None  # revoked in the database
    clock.now += 4.9
    assert ask(cache, "cw_a", database) is Scope.READ
    clock.now += 0.2
    assert ask(cache, "cw_a", database) is None
    assert ask(cache, "cw_a", database) is None
    assert database.asked == 3  # refusals are never cached


def test_an_unknown_token_is_asked_every_time_so_a_new_one_works_at_once(clock: Clock) -> None:
    cache, database = TokenCache(ttl_s=5), Database(None)
    assert ask(cache, "cw_new", database) is None
    database.scope = Scope.INGEST  # created by `cachewatch token create` meanwhile
    assert ask(cache, "cw_new", database) is Scope.INGEST
    assert database.asked == 2


def test_tokens_are_cached_apart_and_the_least_recently_used_leave_first(clock: Clock) -> None:
    cache = TokenCache(ttl_s=5, max_entries=2)
    read, ingest = Database(Scope.READ), Database(Scope.INGEST)
    assert ask(cache, "cw_r", read) is Scope.READ
    assert ask(cache, "cw_i", ingest) is Scope.INGEST
    assert ask(cache, "cw_r", read) is Scope.READ
    assert (read.asked, ingest.asked) == (1, 1)
    third = Database(Scope.ADMIN)
    assert ask(cache, "cw_x", third) is Scope.ADMIN  # evicts cw_i, the least recently used
    assert ask(cache, "cw_i", ingest) is Scope.INGEST
    assert ingest.asked == 2


def test_a_ttl_of_zero_looks_every_request_up(clock: Clock) -> None:
    cache, database = TokenCache(ttl_s=0), Database(Scope.READ)
    for _ in range(3):
        assert ask(cache, "cw_a", database) is Scope.READ
    assert database.asked == 3
