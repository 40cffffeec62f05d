"""Pages of `GET /v1/groups` and `GET /v1/findings` (issue 32, docs/groups.md
"Pages"): the body stays the contract's JSON array, worst first; `limit` and
`offset` pick a page, `X-Total-Count` counts the whole list and `Link: <...>;
rel="next"` gives the next page, so following it to the end gives every entry
exactly once, in order. Bad paging parameters are a 422 that says why."""

import re
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.services import groups as groups_service
from tests.services import findings_traffic as traffic
from tests.services.traffic import store

T0 = 1_764_457_200  # 2025-11-29T23:00:00Z
TENANTS = 23


def records() -> list[dict[str, Any]]:
    """TENANTS tenants with different prompt tokens, two of them tied (the tie goes
    to the first value), over two hours."""
    out = []
    for t in range(TENANTS):
        tokens = 1000 * (1 + t // 2) if t < 4 else 1000 * t  # t-0/t-1, t-2/t-3 tie
        for k in range(2):
            out.append(
                {
                    "request_id": f"p{t}-{k}",
                    "ts": T0 + 3600 * k + t,
                    "service": "svc",
                    "model": "m",
                    "prompt_tokens": tokens,
                    "cached_tokens": tokens // 2,
                    "tenant": f"t-{t:02d}",
                }
            )
    return out


@pytest.fixture
def posted(client: TestClient, ingest_headers: dict[str, str]) -> None:
    body = b"\n".join(orjson.dumps(r) for r in records())
    answer = client.post("/v1/usage", content=body, headers=ingest_headers)
    assert answer.status_code == 200 and answer.json()["rejected"] == 0, answer.text


def next_link(answer: Any) -> str | None:
    link = answer.headers.get("link")
    if link is None:
        return None
    match = re.fullmatch(r'<([^>]+)>; rel="next"', link)
    assert match, link
    return match.group(1)


def walk(client: TestClient, headers: dict[str, str], url: str) -> tuple[list[Any], int]:
    """Every entry, following `Link` from `url` to the last page, and the pages."""
    entries: list[Any] = []
    pages = 0
    next_url: str | None = url
    while next_url is not None:
        answer = client.get(next_url, headers=headers)
        assert answer.status_code == 200, answer.text
        page = answer.json()
        assert isinstance(page, list) and page
        entries.extend(page)
        pages += 1
        assert pages < 100
        next_url = next_link(answer)
    return entries, pages


def test_following_next_gives_every_group_once_in_order(
    client: TestClient, read_headers: dict[str, str], posted: None
) -> None:
    whole = client.get("/v1/groups?by=tenant", headers=read_headers)
    assert whole.status_code == 200
    assert whole.headers["x-total-count"] == str(TENANTS) and "link" not in whole.headers
    everything = whole.json()
    order = [(-g["prompt_tokens"], g["value"]) for g in everything]
    assert order == sorted(order) and len(everything) == TENANTS
    assert [g["value"] for g in everything][-4:] == ["t-02", "t-03", "t-00", "t-01"]
    entries, pages = walk(client, read_headers, "/v1/groups?by=tenant&service=svc&limit=5")
    assert entries == everything and pages == 5
    last = client.get("/v1/groups?by=tenant&limit=5&offset=20", headers=read_headers)
    assert [g["value"] for g in last.json()] == [g["value"] for g in everything[20:]]
    assert "link" not in last.headers and last.headers["x-total-count"] == str(TENANTS)
    beyond = client.get("/v1/groups?by=tenant&offset=1000", headers=read_headers)
    assert beyond.json() == [] and beyond.headers["x-total-count"] == str(TENANTS)


def test_the_next_link_keeps_the_other_parameters(
    client: TestClient, read_headers: dict[str, str], posted: None
) -> None:
    answer = client.get(
        "/v1/groups?by=tenant&model=m&from=2025-11-29T00:00:00Z&limit=4", headers=read_headers
    )
    link = next_link(answer)
    assert link is not None and link.startswith("http")
    for part in ("by=tenant", "model=m", "from=2025-11-29T00%3A00%3A00Z", "limit=4", "offset=4"):
        assert part in link, link


def test_a_page_merges_only_its_own_values(
    client: TestClient,
    read_headers: dict[str, str],
    posted: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The database ranks the values; only the page's rows are read and merged."""
    merged: list[int] = []
    real = groups_service.totals_per_value

    def spy(rows: Any) -> Any:
        merged.append(rows["group_value"].n_unique())
        return real(rows)

    monkeypatch.setattr(groups_service, "totals_per_value", spy)
    answer = client.get("/v1/groups?by=tenant&limit=3", headers=read_headers)
    assert len(answer.json()) == 3 and merged == [3]


def test_the_default_and_the_maximum_page_are_settings(
    client: TestClient, read_headers: dict[str, str], posted: None, app: Any
) -> None:
    settings = app.state.settings
    app.state.settings = settings.model_copy(update={"read_page_limit": 10, "read_page_max": 12})
    try:
        answer = client.get("/v1/groups?by=tenant", headers=read_headers)
        assert len(answer.json()) == 10 and "offset=10" in answer.headers["link"]
        # More than the maximum answers the maximum, and the next page goes on from it.
        most = client.get("/v1/groups?by=tenant&limit=13", headers=read_headers)
        assert len(most.json()) == 12 and "limit=12&offset=12" in most.headers["link"]
    finally:
        app.state.settings = settings


@pytest.mark.parametrize(
    "query",
    ["limit=0", "limit=-1", "limit=abc", "limit=1.5", "offset=-1", "offset=x", "offset=1e3",
     f"offset={2**70}", f"limit={2**70}", "limit=1000001"],
)  # fmt: skip
@pytest.mark.parametrize("path", ["/v1/groups?by=tenant", "/v1/findings?service=svc"])
def test_a_bad_page_is_a_422_that_names_the_parameter(
    client: TestClient, read_headers: dict[str, str], path: str, query: str
) -> None:
    answer = client.get(f"{path}&{query}", headers=read_headers)
    assert answer.status_code == 422, answer.text
    assert query.split("=")[0] in answer.text


def test_following_next_gives_every_finding_once_in_order(
    client: TestClient, session: Session, read_headers: dict[str, str]
) -> None:
    for kind in ("routing", "volatile_segment", "template_drift"):
        rows = getattr(traffic, kind)()
        store(
            session,
            [{**r, "request_id": f"{kind}-{r['request_id']}", "service": kind} for r in rows],
        )
    session.commit()
    whole = client.get("/v1/findings", headers=read_headers)
    everything = whole.json()
    assert len(everything) >= 3 and whole.headers["x-total-count"] == str(len(everything))
    wasted = [f["wasted_tokens_per_day"] for f in everything]
    assert wasted == sorted(wasted, reverse=True)
    entries, pages = walk(client, read_headers, "/v1/findings?limit=1")
    assert entries == everything and pages == len(everything)
