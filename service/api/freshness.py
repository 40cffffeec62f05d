"""The `CaughtUp` dependency of the read routes of the rollups (`GET /v1/metrics`,
`/dashboard/data/*`): before the route runs, the rollups are brought up to every
committed record by `service.services.freshness.catch_up_before_read`, which writes
and commits in a transaction of its own (its docstring says why), so the route's
session only reads."""

from fastapi import Depends, Request
from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from service.api.deps import SettingsDep
from service.services.freshness import catch_up_before_read


async def catch_up(request: Request, settings: SettingsDep) -> None:
    factory: sessionmaker[Session] = request.app.state.sessionmaker
    await run_in_threadpool(catch_up_before_read, factory, settings)


CaughtUp = Depends(catch_up)
