from fastapi import APIRouter
from sqlalchemy import text

from service.api.deps import SessionDep
from service.api.schemas import UNAVAILABLE, Health

router = APIRouter(tags=["health"], responses=UNAVAILABLE)


@router.get("/healthz", response_model=Health)
def healthz(session: SessionDep) -> Health:
    """Ok when the database answers; a 503 (with Retry-After) when it does not. It
    names nothing else (not the database engine): anyone may ask."""
    session.execute(text("SELECT 1"))
    return Health(status="ok")
