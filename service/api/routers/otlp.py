"""OTLP/HTTP receivers for traces and logs (GenAI spans and events -> usage records).

Answers follow the OTLP/HTTP specification: 200 with an Export*ServiceResponse in
the request's encoding (`partial_success` when some items were rejected), 400 with
a google.rpc.Status for a body that does not decode (clients never retry it), 415
for another Content-Type; 401/403/413/503 as POST /v1/usage."""

import time
from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Request, Response
from google.protobuf.message import Message

from service.api.deps import BodyDep, IngestAuth, SessionDep, SettingsDep
from service.api.params import ContentEncodingHeader
from service.api.schemas import OTLP_ERRORS, otlp_body
from service.ingest import otlp
from service.profiles import profiles_for
from service.services.otlp import ingest_otlp, keep_undecodable
from service.services.rejected import RejectedLimits

router = APIRouter(tags=["ingestion"], responses=OTLP_ERRORS)


def _receiver(signal: otlp.Signal) -> Callable[..., Response]:
    """The endpoint of one signal; traces and logs differ in nothing else."""

    def receive(
        request: Request,
        body: BodyDep,
        session: SessionDep,
        settings: SettingsDep,
        content_encoding: Annotated[str | None, ContentEncodingHeader] = None,
    ) -> Response:
        received_us = time.time_ns() // 1000
        try:
            # Read here, not declared as a header parameter: OpenAPI ignores one named
            # Content-Type; the request body's media types (OTLP_BODY) say it.
            encoding = otlp.body_encoding(request.headers.get("content-type"))
        except otlp.UnsupportedMediaType as exc:
            keep_undecodable(session, body.data, signal, str(exc), received_us)
            return _answer(otlp.status(str(exc)), "json", 415)
        outcome = ingest_otlp(
            session,
            body.data,
            signal=signal,
            encoding=encoding,
            content_encoding=content_encoding,
            max_decompressed_bytes=settings.max_decompressed_bytes,
            received_us=received_us,
            reservation=body.reservation,
            rejected_limits=RejectedLimits.of(settings),
            profiles=profiles_for(settings),
        )
        if outcome.undecodable is not None:
            # Returned, not raised: the session still commits the kept raw body.
            return _answer(otlp.status(outcome.undecodable), encoding, 400)
        answer = otlp.export_response(signal, outcome.rejected, outcome.error_message)
        return _answer(answer, encoding, 200)

    return receive


# `name` makes the OpenAPI operation id and summary ("post_traces_v1_otlp_v1_traces_post",
# "Post Traces"): clients generated from the schema rely on them.
_MESSAGES: dict[otlp.Signal, str] = {
    "traces": "ExportTraceServiceRequest",
    "logs": "ExportLogsServiceRequest",
}
# Each signal at two paths: under `/v1/otlp` (the base URL the docs gave first) and
# at the root, where an exporter given the server's own address
# (`OTEL_EXPORTER_OTLP_ENDPOINT=http://cachewatch:8000`, as Claude Code's settings
# take it) appends `/v1/logs` or `/v1/traces`.
for _signal, _message in _MESSAGES.items():
    for _path, _name in (
        (f"/v1/otlp/v1/{_signal}", _signal),
        (f"/v1/{_signal}", f"{_signal}_at_root"),
    ):
        router.add_api_route(
            _path,
            _receiver(_signal),
            methods=["POST"],
            name=f"post_{_name}",
            description=(
                f"OTLP {_message}, protobuf or JSON (`application/json`, OTLP's JSON "
                "mapping), gzip accepted; any other Content-Type is a 415."
            ),
            dependencies=[IngestAuth],
            openapi_extra=otlp_body(_message),
        )


def _answer(message: Message, encoding: otlp.Encoding, status_code: int) -> Response:
    content, media_type = otlp.encode(message, encoding)
    return Response(content=content, status_code=status_code, media_type=media_type)
