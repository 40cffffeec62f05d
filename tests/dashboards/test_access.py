"""Who may see the dashboard and the read API, the login page, and what the page
shows before any data (in-process; the browser tests drive a real server)."""

from collections.abc import Iterator
from urllib.parse import parse_qs, urlparse

import orjson
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from httpx import Response
from sqlalchemy.orm import Session, sessionmaker

from service.api.app import create_app
from service.api.deps import AUTH_COOKIE
from service.settings import Settings
from tests.dashboards.helpers import XSS, records

T0 = 1_764_399_600
READ_PATHS = [
    "/dashboard/data/series",
    "/dashboard/data/tables",
    "/dashboard/data/capacity",
    "/dashboard/data/findings",
    "/v1/metrics",
    "/v1/regressions",
    "/v1/events",
    "/metrics",
]


def test_without_a_token_the_page_redirects_and_the_read_api_answers_401(
    client: TestClient,
) -> None:
    page = client.get("/?service=a%20b&range=24h", follow_redirects=False)
    assert page.status_code == 303
    target = urlparse(page.headers["location"])
    assert target.path == "/login"
    assert parse_qs(target.query)["next"] == ["/?service=a%20b&range=24h"]
    for path in READ_PATHS:
        assert client.get(path).status_code == 401, path
    client.cookies.set(AUTH_COOKIE, "cw_not-a-real-token")
    assert client.get("/", follow_redirects=False).status_code == 303
    assert client.get("/v1/metrics").status_code == 401


def test_login_sets_an_http_only_strict_cookie_that_opens_everything(
    client: TestClient, make_token: object
) -> None:
    token = make_token("read")  # type: ignore[operator]
    form = client.get("/login?next=/%3Frange%3D24h")
    assert form.status_code == 200 and 'name="token"' in form.text
    assert 'value="/?range=24h"' in form.text
    answer = client.post(
        "/login",
        content=f"token={token}&next=%2F%3Frange%3D24h",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        follow_redirects=False,
    )
    assert answer.status_code == 303 and answer.headers["location"] == "/?range=24h"
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"{AUTH_COOKIE}={token};")
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/" in cookie
    page = client.get("/", follow_redirects=False)
    assert page.status_code == 200 and "Sign out" in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for path in READ_PATHS:
        assert client.get(path).status_code in (200, 202), path
    out = client.post("/logout", follow_redirects=False)
    assert out.status_code == 303 and f'{AUTH_COOKIE}=""' in out.headers["set-cookie"]
    client.cookies.clear()
    assert client.get("/v1/metrics").status_code == 401


def test_bearer_tokens_work_on_the_page_and_data_too(
    client: TestClient, read_headers: dict[str, str]
) -> None:
    assert client.get("/", headers=read_headers).status_code == 200
    assert client.get("/dashboard/data/series", headers=read_headers).status_code == 200


@pytest.mark.parametrize(
    ("token_kind", "status", "message"),
    [("none", 401, "Unknown or revoked token"), ("ingest", 403, "`ingest` scope")],
)
def test_login_refuses_unknown_and_ingest_tokens(
    client: TestClient, make_token: object, token_kind: str, status: int, message: str
) -> None:
    token = "cw_nope" if token_kind == "none" else make_token(token_kind)  # type: ignore[operator]
    answer = client.post(
        "/login",
        content=f"token={token}&next=/",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        follow_redirects=False,
    )
    assert answer.status_code == status and message in answer.text
    assert "set-cookie" not in answer.headers


@pytest.mark.parametrize("target", ["//evil.example/x", "https://evil.example", "/\\evil", ""])
def test_login_never_redirects_off_site(
    client: TestClient, make_token: object, target: str
) -> None:
    token = make_token("read")  # type: ignore[operator]
    answer = client.post(
        "/login",
        content=f"token={token}&next={target}",
        headers={"Content-Type": "application/x-www-form-urlencoded"},
        follow_redirects=False,
    )
    assert answer.headers["location"] == "/"


@pytest.fixture
def public_client(
    settings: Settings, session_factory: sessionmaker[Session]
) -> Iterator[TestClient]:
    app: FastAPI = create_app(settings.model_copy(update={"public_read": True}))
    app.state.sessionmaker = session_factory
    with TestClient(app) as client:
        yield client


def test_public_read_opens_the_page_and_read_api_not_ingestion(public_client: TestClient) -> None:
    assert public_client.get("/", follow_redirects=False).status_code == 200
    for path in READ_PATHS:
        assert public_client.get(path).status_code in (200, 202), path
    assert public_client.post("/v1/usage", content=b"{}").status_code == 401


def test_empty_state_says_what_to_send(public_client: TestClient) -> None:
    page = public_client.get("/")
    assert "No usage records yet" in page.text and "POST /v1/usage" in page.text
    assert "block_hashes" in page.text and "/v1/events" in page.text
    series = public_client.get("/dashboard/data/series").json()
    assert series["notes"]["hit_rate"] == "No usage records for these filters in this range."
    assert series["headline"]["current"]["hit_rate"] is None
    # No data is not "no prices": the wasted card shows the dash of every empty card.
    assert series["headline"]["wasted"]["value"] == "\u2013"
    assert series["notes"]["cost"] == series["notes"]["hit_rate"]
    assert series["figures"]["cost"] is None
    tables = public_client.get("/dashboard/data/tables").json()
    assert tables["regressions"] == [] and "No regressions" in tables["notes"]["regressions"]
    assert "block_hashes" in tables["notes"]["prefixes"]
    capacity = public_client.get("/dashboard/data/capacity").json()
    assert capacity["figure"] is None and capacity["note"]
    findings = public_client.get("/dashboard/data/findings").json()
    assert findings["findings"] == [] and findings["missing"] == []
    assert findings["note"] == series["notes"]["hit_rate"]


def test_user_strings_are_escaped_in_the_page(
    client: TestClient, ingest_headers: dict[str, str], read_headers: dict[str, str]
) -> None:
    body = b"\n".join(orjson.dumps(r) for r in records(50, T0, 3600, service=XSS, model=XSS))
    assert client.post("/v1/usage", content=body, headers=ingest_headers).status_code == 200
    assert client.get("/v1/metrics", headers=read_headers).status_code == 200  # catch up
    page = client.get("/", params={"service": XSS}, headers=read_headers)
    assert page.status_code == 200
    assert XSS not in page.text and "<script>alert" not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    series = client.get("/dashboard/data/series", params={"service": XSS}, headers=read_headers)
    assert series.json()["headline"]["current"]["requests"] == 50
    assert "<script" not in orjson.dumps(series.json()["figures"]).decode()


def test_bad_filters_are_explained(client: TestClient, read_headers: dict[str, str]) -> None:
    page = client.get("/?bucket=fortnight", headers=read_headers)
    assert page.status_code == 400 and "`bucket`" in page.text
    data = client.get("/dashboard/data/series?from=yesterday", headers=read_headers)
    assert data.status_code == 422 and "`from`" in data.json()["detail"]
    long = client.get("/dashboard/data/series?service=" + "x" * 101, headers=read_headers)
    assert long.status_code == 422
    # A NUL matches no stored text (and PostgreSQL refuses it): refused, never a 500.
    for path in (
        "series?service=%00",
        "tables?model=a%00",
        "capacity?model=%00",
        "findings?service=%00",
    ):
        answer = client.get(f"/dashboard/data/{path}", headers=read_headers)
        assert answer.status_code == 422 and "NUL" in answer.json()["detail"], path
    assert client.get("/?service=%00", headers=read_headers).status_code == 400


def test_the_fingerprint_docs_the_page_links_to_are_served_as_text(client: TestClient) -> None:
    answer = client.get("/docs/fingerprint.md")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    assert answer.text.startswith("# Sending prefix fingerprints")
    for other in ("../README.md", "dashboard.md", "%2e%2e%2fREADME.md"):
        assert client.get(f"/docs/{other}").status_code == 404, other


def test_plotly_js_is_served_from_the_installed_package(client: TestClient) -> None:
    answer = client.get("/static/plotly.min.js?v=1", headers={"Accept-Encoding": "identity"})
    assert answer.status_code == 200 and "plotly" in answer.text[:2000].lower()
    assert "immutable" in answer.headers["cache-control"]
    assert client.get("/static/nope.js").status_code == 404


def _post_login(client: TestClient, token: str, headers: dict[str, str]) -> Response:
    return client.post(
        "/login",
        content=f"token={token}&next=/",
        headers={"Content-Type": "application/x-www-form-urlencoded", **headers},
        follow_redirects=False,
    )


CROSS_ORIGIN = [
    {"Sec-Fetch-Site": "cross-site"},
    {"Sec-Fetch-Site": "same-site"},  # a sibling subdomain: still another origin
    {"Sec-Fetch-Site": "cross-site", "Origin": "http://testserver"},  # the browser decides
    {"Origin": "https://evil.example"},
    {"Origin": "null"},
]


@pytest.mark.parametrize("headers", CROSS_ORIGIN)
def test_login_and_logout_refuse_a_cross_origin_post(
    client: TestClient, make_token: object, headers: dict[str, str]
) -> None:
    """Login CSRF (the victim signed in as the attacker) and forced logout."""
    token = make_token("read")  # type: ignore[operator]
    answer = _post_login(client, token, headers)
    assert answer.status_code == 403 and "Refused" in answer.text
    assert "set-cookie" not in answer.headers
    client.cookies.set(AUTH_COOKIE, token)
    out = client.post("/logout", headers=headers, follow_redirects=False)
    assert out.status_code == 403 and "set-cookie" not in out.headers


@pytest.mark.parametrize(
    "headers",
    [
        {"Sec-Fetch-Site": "same-origin", "Origin": "http://testserver"},
        {"Sec-Fetch-Site": "none"},
        {"Origin": "http://testserver"},  # an older browser: no Sec-Fetch-Site
        {"Origin": "http://127.0.0.1:8000"},  # CACHEWATCH_PUBLIC_URL, behind a proxy
        {},  # not a browser (curl, a script)
    ],
)
def test_login_and_logout_from_this_origin_work(
    client: TestClient, make_token: object, headers: dict[str, str]
) -> None:
    token = make_token("read")  # type: ignore[operator]
    answer = _post_login(client, token, headers)
    assert answer.status_code == 303 and answer.headers["set-cookie"].startswith(AUTH_COOKIE)
    out = client.post("/logout", headers=headers, follow_redirects=False)
    assert out.status_code == 303 and f'{AUTH_COOKIE}=""' in out.headers["set-cookie"]
