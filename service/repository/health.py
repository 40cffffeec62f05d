"""The liveness read behind `GET /healthz`."""

from sqlalchemy import text
from sqlalchemy.orm import Session


def ping(session: Session) -> None:
    """One round trip to the database; raises (a DBAPIError, answered 503 with
    Retry-After by `service.api.errors`) when it does not answer."""
    session.execute(text("SELECT 1"))
