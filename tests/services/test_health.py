"""`GET /healthz`'s service: it returns when the database answers and raises the
database's own error when it does not (answered 503 by the API)."""

from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session

from service.services import health


def test_a_database_that_answers(session: Session) -> None:
    health.check(session)


def test_a_database_that_does_not_answer(tmp_path: Path) -> None:
    gone = create_engine(f"sqlite:///{tmp_path / 'no' / 'such' / 'dir' / 'db.sqlite'}")
    with Session(gone) as session, pytest.raises(OperationalError):
        health.check(session)
