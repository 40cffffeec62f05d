"""Read-your-writes for the reads of the rollups: a record acknowledged by
`POST /v1/usage` is counted by the next `GET /v1/metrics` or dashboard data request.

The one service function that a read calls and that writes. Before reading, the
rollups are brought up to every committed record (`analytics_pass.catch_up`:
idempotent, one pass at a time under its lock). It is the exception to "the session
dependency commits once" on purpose, and says so in its name: the catch-up runs in a
transaction of its own, committed before the route's session starts, so

* what it computed is kept whatever the read then answers (a 400 for too many
  buckets, a 422 for a bad parameter) and the next read does not repeat it: inside
  the route's session, the error would roll it back;
* the route's own session only reads, and does not hold the analytics lock (or, on
  SQLite, the write lock) while it builds its answer."""

import time

from sqlalchemy.orm import Session, sessionmaker

from service.services import analytics_pass
from service.settings import Settings


def catch_up_before_read(
    factory: sessionmaker[Session], settings: Settings
) -> analytics_pass.PassReport:
    """WRITES: run the analytics pass over every record committed so far and COMMIT it,
    in a session of `factory` of its own, before a read of the rollups. Blocking (run it
    on a worker thread from async code); waits for a pass running elsewhere.

    With ClickHouse it first waits out the visibility lag: the pass reads the
    records received up to that long ago (service.clickhouse.records), and the
    record just acknowledged must be among them."""
    if settings.clickhouse_url:
        time.sleep(settings.clickhouse_visibility_lag_s)
    with factory.begin() as session:
        report = analytics_pass.catch_up_step(session, settings)
    while report.more:  # a transaction per step (ingestion gets in between), up to
        with factory.begin() as session:  # the records committed before the first
            step = analytics_pass.catch_up_step(session, settings, report.until_id)
        report = report.plus(step)
    return report
