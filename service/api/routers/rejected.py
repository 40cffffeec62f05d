from typing import Annotated

from fastapi import APIRouter, Query

from service.api.deps import ReadAuth, ReadSessionDep
from service.api.schemas import READ_ERRORS, RejectedOut
from service.services.rejected import list_rejected, rejected_to_json

router = APIRouter(tags=["ingestion"], responses=READ_ERRORS)


@router.get("/v1/rejected", dependencies=[ReadAuth], response_model=list[RejectedOut])
def get_rejected(
    session: ReadSessionDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    before_id: Annotated[int | None, Query(ge=1, le=2**62)] = None,
) -> list[RejectedOut]:
    """Rejected input, newest first, verbatim: UTF-8 text, or base64 when the raw
    bytes are not text (a broken gzip body). Page with `before_id`."""
    rows = list_rejected(session, limit, before_id)
    return [RejectedOut(**rejected_to_json(row)) for row in rows]
