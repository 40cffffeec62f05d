"""API tokens: random secrets handed out once; only their SHA-256 is stored."""

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from enum import StrEnum

from sqlalchemy.orm import Session

from service import repository
from service.models import ApiToken

TOKEN_PREFIX = "cw_"


class Scope(StrEnum):
    INGEST = "ingest"
    READ = "read"
    ADMIN = "admin"


def hash_token(token: str) -> str:
    # A token has 256 bits of entropy, so a plain SHA-256 cannot be brute-forced
    # and lets the lookup be one indexed equality.
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(session: Session, scope: Scope, name: str) -> str:
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    repository.add_token(
        session,
        ApiToken(
            name=name,
            scope=scope.value,
            token_hash=hash_token(token),
            created_us=time.time_ns() // 1000,
            revoked=False,
        ),
    )
    return token


def token_scope(session: Session, token: str) -> Scope | None:
    """The scope of a valid token, or None."""
    digest = hash_token(token)
    stored = repository.find_token(session, digest)
    if stored is None or not hmac.compare_digest(stored.token_hash, digest):
        return None
    return Scope(stored.scope)


def allows(granted: Scope, needed: Scope) -> bool:
    return granted is Scope.ADMIN or granted is needed


class TokenCache:
    """Valid tokens seen in the last `ttl_s` seconds, by SHA-256. Without it every
    batch a shipper posts opens a transaction just to read its token, and on SQLite
    that transaction takes the write lock (BEGIN IMMEDIATE): one more lock round a
    request. Only valid tokens are kept, so a new
    token works at once; a revoked one keeps working for at most `ttl_s`."""

    def __init__(self, ttl_s: float, max_entries: int = 1024) -> None:
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._entries: OrderedDict[str, tuple[Scope, float]] = OrderedDict()
        self._lock = threading.Lock()  # read on the event loop, filled from worker threads

    async def scope(
        self, token: str, look_up: Callable[[], Awaitable[Scope | None]]
    ) -> Scope | None:
        """The token's scope from the cache, else from `look_up` (kept when valid).
        Async so that a cached token costs the request no trip to a worker thread;
        `look_up` reads the database, on one."""
        granted = self.cached(token)
        if granted is None:
            granted = await look_up()
            self.remember(token, granted)
        return granted

    def cached(self, token: str) -> Scope | None:
        """The token's scope if it was seen valid within `ttl_s`, else None (look it up)."""
        if self._ttl_s <= 0:
            return None
        digest = hash_token(token)
        with self._lock:
            cached = self._entries.get(digest)
            if cached is None or cached[1] <= time.monotonic():
                return None
            self._entries.move_to_end(digest)  # least recently used leave first
            return cached[0]

    def remember(self, token: str, granted: Scope | None) -> None:
        """What a look-up found: a valid token is kept, an invalid one forgotten."""
        if self._ttl_s <= 0:
            return
        digest = hash_token(token)
        with self._lock:
            if granted is None:
                self._entries.pop(digest, None)
                return
            self._entries[digest] = (granted, time.monotonic() + self._ttl_s)
            self._entries.move_to_end(digest)
            while len(self._entries) > self._max_entries:
                self._entries.popitem(last=False)
