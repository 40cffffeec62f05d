"""Whether the service can serve: today, whether its database answers."""

from sqlalchemy.orm import Session

from service.repository import health as health_repo


def check(session: Session) -> None:
    """Returns when the database answers; raises its error when it does not."""
    health_repo.ping(session)
