"""GET /v1/findings (contract sections 5b and 6): its shape, filters, bad input and
auth, over traffic with one anti-pattern (the service's tests cover every kind)."""

from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from tests.services import findings_traffic as traffic
from tests.services.traffic import store


def test_the_api_answers_the_contracts_shape(
    client: TestClient, session: Session, read_headers: dict[str, str]
) -> None:
    store(session, traffic.routing())
    session.commit()
    answer = client.get("/v1/findings", headers=read_headers)
    assert answer.status_code == 200, answer.text
    (finding,) = answer.json()
    assert set(finding) == {
        "kind", "service", "model", "group", "segment", "since", "share_of_prompt_tokens",
        "wasted_tokens_per_day", "wasted_usd_per_day", "evidence", "fix",
    }  # fmt: skip
    assert finding["kind"] == "routing" and finding["since"].endswith("Z")
    other = client.get("/v1/findings?service=nobody", headers=read_headers)
    assert other.json() == []
    bad = client.get("/v1/findings?from=yesterday", headers=read_headers)
    assert bad.status_code == 422 and "from" in bad.text
    assert client.get("/v1/findings").status_code == 401
