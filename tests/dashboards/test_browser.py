"""The dashboard in a real browser (Playwright driving Debian's /usr/bin/chromium)
against a real `cachewatch serve` on two simulated days with known regressions,
plus a second service whose name, deploy tag and event text are HTML.

Screenshots go to the test's tmp_path, and also to $CACHEWATCH_TEST_OUTPUT when set."""

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest

from dashboards.plotting import CAUSE_NAMES
from service import migrate
from service.alerts.money import usd
from service.analytics.definitions import CAUSES
from service.db import make_engine, make_sessionmaker
from service.services.detection import detect
from service.settings import Settings
from service.simulate import detection_week, simulate
from tests.conftest import LiveServer, drop_database, fresh_database_url, make_live_server
from tests.dashboards.browser import Watched, chromium, require_chromium, save_screenshot
from tests.dashboards.helpers import XSS, records
from tests.simulated import load_records

pytestmark = pytest.mark.slow

SEED = 3
EVIL_DEPLOY = '"><img src=x onerror=alert(2)>'
EVIL_NOTE = "<img src=x onerror=alert(3)> KV cache budget 65536 tokens"
# The hostile service's model has no prices; the simulated one has (MODELS_FILE).
EVIL_MODEL = "<b>unpriced</b>"
MODELS_FILE = """
[[model]]
match = "acme-70b-instruct"
input_usd_per_mtok = 3.00
cached_usd_per_mtok = 0.30
"""
PANELS = ("hit_rate", "cost", "rewarms", "ttft", "replicas", "capacity")


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, database_url: str
) -> Iterator[tuple[LiveServer, str]]:
    """A live server (read token needed) with its database loaded and detected."""
    require_chromium()
    folder = tmp_path_factory.mktemp("dashboard")
    url = fresh_database_url(folder, "dashboard")
    models = folder / "models.toml"
    models.write_text(MODELS_FILE, encoding="utf-8")
    settings = Settings(database_url=url, run_jobs=False, models_file=models)
    engine = make_engine(settings)
    migrate.upgrade(engine)
    week = detection_week(SEED, days=2, peak_rate=0.8)
    result = simulate(week.scenario, SEED)
    start_s = week.scenario.start.timestamp()
    evil = records(3000, start_s, 2 * 86_400, service=XSS, model=EVIL_MODEL)
    for row in evil[1500:]:
        row["deploy"] = EVIL_DEPLOY
    events = [
        *result.events,
        {"ts": start_s + 86_400, "service": XSS, "kind": "deploy", "deploy": EVIL_DEPLOY},
        {"ts": start_s + 90_000, "service": XSS, "kind": "config", "description": EVIL_NOTE},
    ]
    factory = make_sessionmaker(engine)
    with factory.begin() as session:
        load_records(session, [*result.records, *evil], events)
    with factory.begin() as session:
        assert detect(session, settings).created, "the simulated days should hold regressions"
    engine.dispose()
    live = make_live_server(folder, url, run_jobs="false", models_file=str(models))
    live.start()
    try:
        yield live, live.token("read")
    finally:
        live.stop()
        drop_database(url)


@pytest.fixture(scope="module")
def browser(server: tuple[LiveServer, str]) -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.fixture
def watched(browser: Any) -> Iterator[Watched]:
    page = Watched(browser)
    try:
        yield page
    finally:
        page.close()


def test_dashboard_draws_every_panel_and_follows_the_service_filter(
    server: tuple[LiveServer, str], watched: Watched, tmp_path: Path
) -> None:
    live, token = server
    watched.login(live.url, token, "/?service=assistant&range=7d")
    page = watched.page
    cookie = next(c for c in watched.context.cookies() if c["name"] == "cachewatch_token")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert "service=assistant" in page.url

    drawn = watched.figures()
    for panel in PANELS:
        traces = drawn[panel]["traces"]
        assert traces and all(t["n"] > 0 for t in traces if t["name"] != "events"), panel
        assert drawn[panel]["svgTraces"] >= len(traces), panel
    hit_rate = drawn["hit_rate"]
    assert ["line", "event-deploy"] in hit_rate["shapes"]  # an event marker ...
    assert "v1.2.0" in hit_rate["svgText"]  # ... with its label drawn
    assert any(kind == "rect" for kind, _ in hit_rate["shapes"])  # a regression span
    assert any(text and text.startswith("#") for text in hit_rate["annotations"])
    assert ["line", "budget"] in drawn["capacity"]["shapes"]  # the KV budget event
    assert page.locator("#regressions tbody tr").count() >= 1
    assert page.locator("#prefixes tbody tr").count() >= 1
    # Counts are grouped by thousands as the API's numbers are (formatted by hand in
    # dashboard.js, not by the locale: an exact match).
    tables = page.evaluate(
        "async (q) => (await fetch('/dashboard/data/tables?' + q)).json()",
        "service=assistant&range=7d",
    )
    first = tables["prefixes"][0]
    cells = page.locator("#prefixes tbody tr").first.locator("td").all_text_contents()
    assert first["prompt_tokens"] >= 1000
    assert cells[2:4] == [f"{first['requests']:,}", f"{first['prompt_tokens']:,}"]
    assert page.text_content("#hl-hit_rate .value") not in ("", "\u2013")  # en dash: none yet
    # Money: the wasted card, the cost panel (drawn above) and the regressions' cost
    # cells show what the server worded (service.alerts.money), priced throughout.
    series = page.evaluate(
        "async (q) => (await fetch('/dashboard/data/series?' + q)).json()",
        "service=assistant&range=7d",
    )
    wasted = series["headline"]["current"]["wasted_usd"]
    assert wasted is not None and wasted > 0
    assert page.text_content("#hl-wasted .value") == usd(wasted)
    assert page.text_content("#hl-wasted h3").lower() == "wasted in range"
    assert page.locator("#panel-cost .note").is_hidden()  # every model has prices
    bars = [t["name"] for t in drawn["cost"]["traces"] if t["name"] != "spend"]
    assert bars == [CAUSE_NAMES[c] for c in CAUSES]
    costs = [
        row.locator("td").nth(6).text_content()
        for row in page.locator("#regressions tbody tr").all()
    ]
    assert costs == [r["cost"] for r in tables["regressions"]]
    assert any(re.fullmatch(r"\+\$[0-9,.]+/day", c or "") for c in costs), costs
    save_screenshot(page, tmp_path, "dashboard")

    page.select_option("select[name=service]", XSS)
    page.wait_for_url(lambda url: "service=%3Cscript" in url)
    watched.drawn()
    switched = watched.figures()
    for panel in ("hit_rate", "rewarms", "ttft", "replicas"):
        ys = [t["y"] for t in switched[panel]["traces"]]
        assert ys != [t["y"] for t in drawn[panel]["traces"]], panel
    assert page.locator("select[name=service] option:checked").text_content() == XSS
    assert watched.errors == [] and watched.dialogs == []


def test_html_in_names_shows_as_text_and_runs_nothing(
    server: tuple[LiveServer, str], watched: Watched, tmp_path: Path
) -> None:
    live, token = server
    watched.login(live.url, token, "/?" + urlencode({"service": XSS, "range": "7d"}))
    page = watched.page
    assert page.title().startswith(XSS)
    assert page.locator("select[name=service] option:checked").text_content() == XSS
    assert page.locator("img[src=x]").count() == 0
    assert page.evaluate("() => document.querySelectorAll('script').length") == 2
    text = watched.figures()["hit_rate"]["svgText"]
    assert any(t.startswith('"><img src=x') for t in text), text  # the deploy label
    prefixes = page.locator("#prefixes tbody td").all_text_contents()
    assert any(XSS in cell for cell in prefixes)
    # The findings panel names the service and model as text.
    findings = page.locator("#findings details.finding")
    assert findings.count() >= 1
    assert findings.first.locator("summary span").nth(1).text_content() == f"{XSS} · {EVIL_MODEL}"
    assert page.locator("#panel-findings b, #panel-findings script").count() == 0
    # Its model has no prices: the card says so, and the cost panel's note names the
    # model, as text, with no chart.
    assert page.text_content("#hl-wasted .value") == "no prices"
    note = page.locator("#panel-cost .note")
    assert note.is_visible()
    assert (note.text_content() or "").startswith(f"No prices for model {EVIL_MODEL}: its")
    assert page.locator("#panel-cost b").count() == 0
    assert page.locator('[data-figure="cost"].empty').count() == 1
    save_screenshot(page, tmp_path, "escaped")
    assert watched.errors == [] and watched.dialogs == []


def test_tokens_guard_the_page_and_read_api(server: tuple[LiveServer, str]) -> None:
    live, token = server
    with httpx.Client(base_url=live.url) as client:
        page = client.get("/")
        assert page.status_code == 303 and page.headers["location"].startswith("/login?next=")
        for path in ("/dashboard/data/series", "/v1/metrics", "/v1/regressions", "/metrics"):
            assert client.get(path).status_code == 401, path
        bearer = {"Authorization": f"Bearer {token}"}
        assert client.get("/", headers=bearer).status_code == 200
        assert client.get("/v1/regressions", headers=bearer).json()
        client.cookies.set("cachewatch_token", token)
        assert client.get("/dashboard/data/series?service=assistant").json()["points"] > 0
        assert client.get("/v1/metrics").status_code == 200
