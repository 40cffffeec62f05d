from fastapi import APIRouter

from service.api.deps import ReadSessionDep
from service.api.schemas import UNAVAILABLE, Health
from service.services import health

router = APIRouter(tags=["health"], responses=UNAVAILABLE)


@router.get("/healthz", response_model=Health)
def healthz(session: ReadSessionDep) -> Health:
    """Ok when the database answers (and ClickHouse, in a deployment that has it); a
    503 (with Retry-After) when one does not, saying why in a few words (a
    ClickHouse that is down: which transport error or HTTP status, never its
    address). It names nothing else (not the database engine): anyone may ask."""
    health.check(session)
    return Health(status="ok")
