"""GET /v1/diagnoses: the providers' own miss diagnoses beside cachewatch's."""

from typing import Any

from fastapi import APIRouter

from service.api.deps import ReadAuth, ReadSessionDep
from service.api.freshness import CaughtUp
from service.api.params import ModelParam, ServiceParam, TimeParam, ToParam, parse_time_param
from service.api.schemas import READ_ERRORS, DiagnosesOut
from service.diagnoses.agreement import Agreement
from service.services.diagnoses import provider_agreement

router = APIRouter(tags=["analytics"], responses=READ_ERRORS)


@router.get("/v1/diagnoses", dependencies=[ReadAuth, CaughtUp], response_model=DiagnosesOut)
def get_diagnoses(
    session: ReadSessionDep,
    service: ServiceParam = None,
    model: ModelParam = None,
    from_: TimeParam = None,
    to: ToParam = None,
) -> dict[str, Any]:
    """Of the requests whose provider diagnosed a miss itself (Anthropic's cache
    diagnostics, OpenAI's prompt cache diagnostics), per reason: how many, and how
    many cachewatch put under the same cause and segment (docs/detection.md,
    "Providers' diagnoses"). Over the hours that start in the range."""
    found = provider_agreement(
        session,
        service=service or None,
        model=model or None,
        from_us=parse_time_param("from", from_),
        to_us=parse_time_param("to", to),
    )
    return as_json(found)


def as_json(found: Agreement) -> dict[str, Any]:
    return {
        "compared": found.compared,
        "agreed": found.agreed,
        "share": found.share,
        "reasons": [
            {
                "reason": row.reason,
                "kind": row.kind,
                "requests": row.requests,
                "missed_tokens": row.missed_tokens,
                "agreed": row.agreed,
                "share": row.share,
                "cachewatch": [
                    {"found": f.label, "requests": f.requests, "agrees": f.agrees}
                    for f in row.found
                ],
            }
            for row in found.rows
        ],
    }
