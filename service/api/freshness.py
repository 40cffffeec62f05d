"""Read-your-writes for the read routes: a record acknowledged by `POST /v1/usage`
is counted by the next read of the metrics, the dashboard or anything else that
reads the rollups.

The `CaughtUp` dependency brings the rollups up to every committed record before
the route reads them (`analytics_pass.catch_up`, idempotent, one pass at a time
under its lock). It runs in a transaction of its own, committed before the route's
session starts: what it computed is kept whatever the read then answers (a 400 for
too many buckets, a 422 for a bad parameter), so the next read does not repeat it,
and the route's own session only reads."""

from fastapi import Depends, Request
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from service.api.deps import SettingsDep
from service.services import analytics_pass
from service.settings import Settings


async def catch_up(request: Request, settings: SettingsDep) -> None:
    factory: sessionmaker[Session] = request.app.state.sessionmaker
    await run_in_threadpool(_catch_up_committed, factory, settings)


def _catch_up_committed(factory: sessionmaker[Session], settings: Settings) -> None:
    with factory.begin() as session:
        analytics_pass.catch_up(session, settings)


CaughtUp = Depends(catch_up)
