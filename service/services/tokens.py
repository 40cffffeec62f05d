"""API tokens: random secrets handed out once; only their SHA-256 is stored."""

import hashlib
import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
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
    request, ~4% of the ingest path's CPU. Only valid tokens are kept, so a new
    token works at once; a revoked one keeps working for at most `ttl_s`."""

    def __init__(self, ttl_s: float, max_entries: int = 1024) -> None:
        self._ttl_s = ttl_s
        self._max_entries = max_entries
        self._entries: OrderedDict[str, tuple[Scope, float]] = OrderedDict()
        self._lock = threading.Lock()  # sync dependencies run on worker threads

    def scope(self, token: str, look_up: Callable[[], Scope | None]) -> Scope | None:
        """The token's scope from the cache, else from `look_up` (kept when valid)."""
        if self._ttl_s <= 0:
            return look_up()
        digest = hash_token(token)
        now = time.monotonic()
        with self._lock:
            cached = self._entries.get(digest)
            if cached is not None and cached[1] > now:
                self._entries.move_to_end(digest)  # least recently used leave first
                return cached[0]
        granted = look_up()
        with self._lock:
            if granted is None:
                self._entries.pop(digest, None)
            else:
                self._entries[digest] = (granted, now + self._ttl_s)
                self._entries.move_to_end(digest)
                while len(self._entries) > self._max_entries:
                    self._entries.popitem(last=False)
        return granted
