import time
from typing import Annotated

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from service.api.deps import BodyDep, IngestAuth, SessionDep, SettingsDep
from service.api.params import ContentEncodingHeader
from service.api.schemas import (
    USAGE_RECORD_SCHEMA,
    WRITE_ERRORS,
    IngestAnswer,
    RecordError,
    json_body,
)
from service.services.ingestion import ingest_usage
from service.services.rejected import RejectedLimits

router = APIRouter(tags=["ingestion"], responses=WRITE_ERRORS)


@router.post(
    "/v1/usage",
    dependencies=[IngestAuth],
    response_model=IngestAnswer,
    openapi_extra=json_body(USAGE_RECORD_SCHEMA),
)
def post_usage(
    body: BodyDep,
    session: SessionDep,
    settings: SettingsDep,
    content_encoding: Annotated[str | None, ContentEncodingHeader] = None,
) -> IngestAnswer | JSONResponse:
    """NDJSON, a JSON array of records or one record; gzip accepted."""
    outcome = ingest_usage(
        session,
        body.data,
        content_encoding=content_encoding,
        max_decompressed_bytes=settings.max_decompressed_bytes,
        received_us=time.time_ns() // 1000,
        reservation=body.reservation,
        rejected_limits=RejectedLimits.of(settings),
    )
    if outcome.undecodable is not None:
        # Returned, not raised: the session still commits the kept raw body.
        return JSONResponse({"error": outcome.undecodable}, status_code=400)
    return IngestAnswer(
        accepted=outcome.accepted,
        duplicates=outcome.duplicates,
        rejected=outcome.rejected,
        errors=[RecordError(**e) for e in outcome.errors],
    )
