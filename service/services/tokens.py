"""API tokens: random secrets handed out once; only their SHA-256 is stored."""

import hashlib
import hmac
import secrets
import time
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
