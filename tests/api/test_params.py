"""Query parameters no stored text can match are refused by validation with 422,
never a 500 (schemathesis found a NUL in `service` failing inside PostgreSQL), and
only after auth: without a token the answer stays 401."""

import pytest
from fastapi.testclient import TestClient


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/metrics?service=a%00b"),
        ("GET", "/v1/events?model=%00"),
        ("GET", "/v1/regressions?service=x%00"),
        ("POST", "/v1/detect?service=%00"),
    ],
)
def test_a_nul_in_a_query_parameter_is_a_422(
    client: TestClient, make_token, method: str, path: str
) -> None:  # type: ignore[no-untyped-def]
    headers = {"Authorization": f"Bearer {make_token('admin')}"}
    answer = client.request(method, path, headers=headers)
    assert answer.status_code == 422, answer.text
    [error] = answer.json()["detail"]
    assert error["loc"][0] == "query" and error["type"] == "string_pattern_mismatch"
    assert client.request(method, path).status_code == 401
