"""`GET /metrics`: Prometheus text format (read scope, like the rest of the read
API; Prometheus sends the token with `authorization: {credentials: ...}`)."""

from fastapi import APIRouter
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service import telemetry
from service.api.deps import ReadAuth, ReadSessionDep
from service.api.schemas import READ_ERRORS

router = APIRouter(tags=["health"], responses=READ_ERRORS)


@router.get("/metrics", dependencies=[ReadAuth], response_class=Response)
def prometheus_metrics(session: ReadSessionDep) -> Response:
    """The service's own counters and per (service, model) gauges of the last hour."""
    body = generate_latest(telemetry.scrape_registry(session))
    return Response(body, media_type=CONTENT_TYPE_LATEST)
