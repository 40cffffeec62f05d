import base64
from typing import Annotated

from fastapi import APIRouter, Query

from service import repository
from service.api.deps import ReadAuth, SessionDep
from service.api.schemas import READ_ERRORS, RejectedOut
from service.ingest.timestamps import us_to_rfc3339

router = APIRouter(tags=["ingestion"], responses=READ_ERRORS)


@router.get("/v1/rejected", dependencies=[ReadAuth], response_model=list[RejectedOut])
def get_rejected(
    session: SessionDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    before_id: Annotated[int | None, Query(ge=1, le=2**62)] = None,
) -> list[RejectedOut]:
    """Rejected input, newest first, verbatim: UTF-8 text, or base64 when the raw
    bytes are not text (a broken gzip body). Page with `before_id`."""
    answer = []
    for row in repository.list_rejected(session, limit, before_id):
        try:
            raw, encoding = row.raw.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            raw, encoding = base64.b64encode(row.raw).decode("ascii"), "base64"
        answer.append(
            RejectedOut(
                id=row.id,
                received_at=us_to_rfc3339(row.received_us),
                endpoint=row.endpoint,
                index=row.batch_index,
                request_id=row.request_id,
                reason=row.reason,
                raw=raw,
                raw_encoding=encoding,
            )
        )
    return answer
