"""Every operation of the OpenAPI schema, fuzzed by schemathesis with each token
scope (none, ingest, read, admin), in process on the test database: its examples,
coverage (boundary values, each parameter missing or wrong, undeclared methods,
odd content types) and fuzzing phases, valid and invalid data, with every check
that applies to this API (CHECKS). It reports nothing: no 500, every answer is
one the schema declares, invalid data is refused with a 4xx and valid data is
accepted, an undeclared method is a 405 with the right `Allow`, and a token
without the scope is refused (401 without one, 403 with another scope) before
anything else.

Adjustments, each because the contract says so:
- `POST /v1/usage` answers 200 to any body that decodes, bad records included
  (contract section 2: they are counted as rejected), so for it the check that
  invalid data gets a 4xx is replaced by one that every record sent is counted.
- A body sent with `Content-Encoding: gzip` is gzipped first, as every client that
  sends the header does; the schema cannot tie a header to the body's bytes.
- OTLP protobuf bodies are drawn as real (small) messages: `format: binary` cannot
  say which bytes parse.

The dashboard's data requests (`/dashboard/data/*`) are not in the schema and not
fuzzed here: they are the page's private protocol (Plotly payloads, changed with
the page), and their parameters have rules across fields (`to` after `from`, a
bucket raised to fit the points) that OpenAPI cannot state, so a schema of them
could not be exact. tests/dashboards covers them."""

import gzip
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans
from schemathesis import Case
from schemathesis.checks import (
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    not_a_server_error,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.core.transport import Response
from schemathesis.generation.meta import CoverageScenario
from schemathesis.specs.openapi.checks import (
    allow_header_conformance,
    missing_required_header,
    unsupported_method,
)
from sqlalchemy.orm import Session, sessionmaker

from service.api.app import create_app
from service.ingest.body import GZIP_ENCODINGS
from service.services.tokens import Scope, allows
from service.settings import Settings

CONFORMANCE = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
    unsupported_method,
    allow_header_conformance,
    missing_required_header,
]


def negative_data_refused(ctx: Any, response: Response, case: Case) -> bool | None:
    """schemathesis's negative_data_rejection, with 413 among the refusals: a body
    over a documented `maxItems` (POST /v1/events' 10,000) is "too large" in the
    contract (section 2), which schemathesis's list of codes leaves out."""
    if response.status_code == 413:
        return None
    return negative_data_rejection(ctx, response, case)


CHECKS = [*CONFORMANCE, negative_data_refused, positive_data_acceptance, ignored_auth]
SCOPES = [None, *Scope]
# Per operation and scope, in the fuzzing phase (the coverage phase adds its own
# cases): enough for the edge cases of each parameter while the module stays near
# a minute on two cores.
MAX_EXAMPLES = 50

# The schema, read once at collection (schemathesis' lazy fixture loader needs a
# private pytest attribute that pytest 9 removed); each case is sent to the test's
# own app instead (`app_under_test`), bound to its rolled-back transaction.
api = schemathesis.openapi.from_asgi(
    "/openapi.json", create_app(Settings(database_url="sqlite://"))
)


@pytest.fixture
def app_under_test(settings: Settings, session_factory: sessionmaker[Session]) -> FastAPI:
    app = create_app(settings)
    app.state.sessionmaker = session_factory
    return app


#: The token the cases carry, set per test by `bearer` (generation runs inside the
#: test, after its fixtures).
SENT_TOKEN: dict[str, str | None] = {"token": None}


@api.auth(refresh_interval=None, retry_on=[])
class BearerToken:
    """The run's credentials, as schemathesis auth rather than plain headers: a case
    that leaves out `Authorization` on purpose (to see it refused) then goes out
    without it, and `ignored_auth` knows which requests carried a token."""

    def get(self, case: Case, context: Any) -> str | None:
        return SENT_TOKEN["token"]

    def set(self, case: Case, data: str, context: Any) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {data}"}


@pytest.fixture
def bearer(scope: Scope | None, make_token: Callable[[str], str]) -> Iterator[None]:
    SENT_TOKEN["token"] = make_token(scope.value) if scope else None
    yield
    SENT_TOKEN["token"] = None


def _protobuf_bodies() -> st.SearchStrategy[bytes]:
    """Serialized OTLP requests, valid as traces and as logs alike (both messages
    start with a repeated resource and a scope, the only fields filled): a body
    schema of `format: binary` cannot say which bytes parse."""
    text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=20)
    attributes = st.dictionaries(text, text, max_size=3).map(
        lambda attrs: [KeyValue(key=k, value=AnyValue(string_value=v)) for k, v in attrs.items()]
    )
    resource = st.builds(
        lambda attrs, name: ResourceSpans(
            resource=Resource(attributes=attrs),
            scope_spans=[ScopeSpans(scope=InstrumentationScope(name=name))],
        ),
        attributes,
        text,
    )
    return st.lists(resource, max_size=3).map(
        lambda items: ExportTraceServiceRequest(resource_spans=items).SerializeToString()
    )


for _media_type in ("application/x-protobuf", "application/protobuf"):
    schemathesis.openapi.media_type(_media_type, _protobuf_bodies())


def needed_scope(case: Case) -> Scope | None:
    """The scope the operation's `security` requirement names; None when open."""
    requirements = case.operation.definition.raw.get("security", [])
    scopes = {scope for option in requirements for names in option.values() for scope in names}
    assert len(scopes) <= 1, scopes
    return Scope(scopes.pop()) if scopes else None


def is_undeclared_method(case: Case) -> bool:
    meta = case.meta
    scenario = getattr(getattr(meta, "phase", None), "data", None)
    return getattr(scenario, "scenario", None) == CoverageScenario.UNSPECIFIED_HTTP_METHOD


def body_is_negative(case: Case) -> bool:
    from schemathesis.core.parameters import ParameterLocation

    return case.meta is not None and case.meta.is_negative_at(ParameterLocation.BODY)


def every_record_is_counted(ctx: Any, response: Response, case: Case) -> bool | None:
    """POST /v1/usage: nothing silently dropped, whatever the records."""
    if response.status_code != 200:
        return None
    answer = json.loads(response.content)
    sent = len(case.body) if isinstance(case.body, list) else 1
    counted = answer["accepted"] + answer["duplicates"] + answer["rejected"]
    assert counted == sent, (sent, answer)
    return None


def gzipped_body(case: Case) -> dict[str, Any]:
    """The transport arguments that send the body gzipped when the case's
    Content-Encoding says gzip (service.ingest.body.decompress)."""
    headers = {name.lower(): value for name, value in (case.headers or {}).items()}
    encoding = str(headers.get("content-encoding", "")).strip().lower()
    if encoding not in GZIP_ENCODINGS or case.body is None:
        return {}
    raw = case.body if isinstance(case.body, bytes) else json.dumps(case.body).encode()
    return {"data": gzip.compress(raw)}


@pytest.mark.parametrize("scope", SCOPES, ids=lambda scope: str(scope or "no-token"))
@api.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
def test_every_operation_with_every_scope(
    case: Case, scope: Scope | None, bearer: None, app_under_test: FastAPI
) -> None:
    case.operation.app = app_under_test  # also reached by the checks' own probes
    needed = needed_scope(case)
    kwargs = gzipped_body(case)
    if needed is None or (scope is not None and allows(scope, needed)):
        checks: list[Any] = list(CHECKS)
        if case.operation.path == "/v1/usage":
            checks.append(every_record_is_counted)
            if body_is_negative(case):
                checks.remove(negative_data_refused)
        case.call_and_validate(checks=checks, **kwargs)
        return
    response = case.call_and_validate(checks=CONFORMANCE, **kwargs)
    if is_undeclared_method(case):
        assert response.status_code == 405
    else:
        # 403 for our token; 401 without one (a case may leave it out on purpose).
        sent = response.request.headers.get("Authorization")
        carried = SENT_TOKEN["token"] is not None and sent == f"Bearer {SENT_TOKEN['token']}"
        assert response.status_code == (403 if carried else 401), response.text
