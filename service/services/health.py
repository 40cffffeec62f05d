"""Whether the service can serve: whether its database answers, and in a ClickHouse
deployment whether ClickHouse does too (without it no record is stored or read)."""

from sqlalchemy.orm import Session

from service.clickhouse import clickhouse_of
from service.clickhouse.client import ClickHouseError, ClickHouseUnavailable
from service.repository import health as health_repo


def check(session: Session) -> None:
    """Returns when the databases answer; raises the relational database's error,
    or ClickHouseUnavailable (any refusal of ClickHouse's counts: it cannot serve
    records while it refuses a `SELECT 1`)."""
    health_repo.ping(session)
    if (ch := clickhouse_of(session)) is None:
        return
    try:
        ch.query("SELECT 1 AS ok")
    except ClickHouseUnavailable:
        raise
    except ClickHouseError as exc:
        raise ClickHouseUnavailable("refused a ping", str(exc)) from exc
