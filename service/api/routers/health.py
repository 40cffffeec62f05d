from fastapi import APIRouter

from service.api.deps import SessionDep
from service.api.schemas import UNAVAILABLE, Health
from service.services import health

router = APIRouter(tags=["health"], responses=UNAVAILABLE)


@router.get("/healthz", response_model=Health)
def healthz(session: SessionDep) -> Health:
    """Ok when the database answers; a 503 (with Retry-After) when it does not. It
    names nothing else (not the database engine): anyone may ask."""
    health.check(session)
    return Health(status="ok")
