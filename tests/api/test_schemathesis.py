"""Hostile input against the OpenAPI schema of every endpoint (schemathesis, in
process, on the test database): whatever it sends, no answer is a 500 and every
answer (status, content type, body) is one the schema declares; without the right
token every endpoint answers 401 or 403, still as declared."""

from collections.abc import Callable
from typing import Any

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from service.api.app import create_app
from service.settings import Settings

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]
# Per operation: enough to hit the edge cases of each parameter (empty, huge, odd
# characters, wrong types), while the whole module stays well under 2 minutes.
MAX_EXAMPLES = 40


def _operations() -> list[tuple[str, str]]:
    """(method, path) of every operation in the schema, read at collection time.
    (schemathesis' own pytest integration needs a private pytest attribute that
    pytest 9 removed, so each operation is a plain parametrized test here.)"""
    spec = create_app(Settings(database_url="sqlite://")).openapi()
    return [(method.upper(), path) for path, ops in spec["paths"].items() for method in ops]


OPERATIONS = _operations()


def fuzz(app: FastAPI, method: str, path: str, examples: int, test: Callable[[Any], None]) -> None:
    """Run `test` on generated cases of one operation, valid and invalid ones."""
    operation = schemathesis.openapi.from_asgi("/openapi.json", app)[path][method]
    strategy = st.one_of(
        operation.as_strategy(GenerationMode.POSITIVE),
        operation.as_strategy(GenerationMode.NEGATIVE),
    )
    run = given(case=strategy)(
        settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck))(
            test
        )
    )
    run()


def needed_scope(method: str, path: str) -> str | None:
    """The scope an operation needs: reads `read`, writes `ingest`, detection
    `admin`; the health check none."""
    if path == "/healthz":
        return None
    if path == "/v1/detect":
        return "admin"
    return "ingest" if method.upper() == "POST" else "read"


@pytest.fixture
def tokens(make_token: Callable[[str], str]) -> dict[str, str]:
    return {scope: make_token(scope) for scope in ("ingest", "read", "admin")}


@pytest.mark.parametrize(("method", "path"), OPERATIONS)
def test_every_answer_is_declared_and_none_is_a_500(
    app: FastAPI, tokens: dict[str, str], method: str, path: str
) -> None:
    scope = needed_scope(method, path)
    headers = {"Authorization": f"Bearer {tokens[scope]}"} if scope else {}

    def check(case: Any) -> None:
        case.call_and_validate(headers=headers, checks=CHECKS)

    fuzz(app, method, path, MAX_EXAMPLES, check)


WRONG = {"ingest": "read", "read": "ingest", "admin": "read"}


@pytest.mark.parametrize(("method", "path"), OPERATIONS)
def test_without_the_right_token_every_endpoint_refuses(
    app: FastAPI, tokens: dict[str, str], method: str, path: str
) -> None:
    scope = needed_scope(method, path)
    if scope is None:
        return
    wrong_token = [
        ({}, 401),
        ({"Authorization": "Bearer cw_not-a-token"}, 401),
        ({"Authorization": f"Bearer {tokens[WRONG[scope]]}"}, 403),
    ]

    def check(case: Any) -> None:
        for headers, expected in wrong_token:
            response = case.call_and_validate(headers=headers, checks=CHECKS)
            assert response.status_code == expected, (method, path, headers)

    fuzz(app, method, path, 8, check)
