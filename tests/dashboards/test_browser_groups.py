"""The group selector, the groups table and the deploy tags' panel in a real browser
(Playwright driving Debian's chromium) against a real `cachewatch serve` holding the
grouped traffic of `tests.dashboards.helpers.grouped`: three scenarios (one losing
its prefix halfway), four tenants, and a 10% canary `v2` with a broken prefix in the
last hour beside `v1`."""

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

from dashboards.plotting import plot_ts
from service import migrate
from service.db import make_engine, make_sessionmaker
from service.rfc3339 import us_to_rfc3339
from service.services.analytics_pass import catch_up
from service.settings import Settings
from tests.conftest import LiveServer, drop_database, fresh_database_url, make_live_server
from tests.dashboards.browser import Watched, chromium, require_chromium, save_screenshot
from tests.dashboards.helpers import MODELS_FILE, SPAN_S, T0, grouped
from tests.simulated import load_records

pytestmark = pytest.mark.slow

US = 1_000_000
VIEW = {
    "service": "svc",
    "from": us_to_rfc3339(T0 * US),
    "to": us_to_rfc3339((T0 + SPAN_S) * US),
    "bucket": "5m",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, database_url: str) -> Iterator[str]:
    """A live server (public read) on the grouped traffic, caught up, model m priced."""
    require_chromium()
    folder = tmp_path_factory.mktemp("groups")
    url = fresh_database_url(folder, "groups")
    models = folder / "models.toml"
    models.write_text(MODELS_FILE, encoding="utf-8")
    settings = Settings(database_url=url, run_jobs=False, models_file=models)
    engine = make_engine(settings)
    migrate.upgrade(engine)
    factory = make_sessionmaker(engine)
    events = [{"ts": T0 + 3 * 3600, "service": "svc", "kind": "deploy", "deploy": "v2"}]
    with factory.begin() as session:
        load_records(session, grouped(2400, canary=True), events)
    with factory.begin() as session:
        catch_up(session, settings)
    engine.dispose()
    live: LiveServer = make_live_server(
        folder, url, run_jobs="false", models_file=str(models), public_read="true"
    )
    live.start()
    try:
        yield live.url
    finally:
        live.stop()
        drop_database(url)


@pytest.fixture
def watched(server: str) -> Iterator[Watched]:
    with chromium() as browser:
        page = Watched(browser)
        try:
            yield page
        finally:
            page.close()


def fetch(page: Any, path: str, **params: str) -> Any:
    return page.evaluate("async (u) => (await fetch(u)).json()", path + "?" + urlencode(params))


def params_of(url: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


def hit_rates(watched: Watched) -> list[Any]:
    return watched.figures()["hit_rate"]["traces"][0]["y"]


def test_a_value_clicked_in_the_table_becomes_the_views_group(
    server: str, watched: Watched, tmp_path: Path
) -> None:
    page = watched.page
    page.goto(server + "/?" + urlencode(VIEW))
    watched.drawn()

    # The table: one row per scenario, as /v1/groups answers, a sparkline each.
    api = fetch(page, "/v1/groups", by="scenario", **VIEW)
    rows = page.locator("#groups tbody tr")
    assert [r.get_attribute("data-value") for r in rows.all()] == [g["value"] for g in api]
    assert page.locator("#groups tbody svg.spark path").count() == len(api)
    summary = page.locator('#groups tbody tr[data-value="summary"]')
    cells = summary.locator("td").all_text_contents()
    entry = next(g for g in api if g["value"] == "summary")
    assert cells[1] == f"{entry['requests']:,}" and cells[3] == f"{100 * entry['hit_rate']:.1f}%"
    assert cells[7].startswith("$")  # model m has prices

    # The canary: drawn beside v1, named, with its share.
    canary = page.locator("#panel-canary")
    assert canary.is_visible()
    assert (page.text_content("#canary-sub") or "").startswith("v2 is the canary")
    traces = watched.figures()["canary"]["traces"]
    assert [t["name"] for t in traces if t["name"] != "events"] == ["v2 (canary)", "v1"]
    assert all(t["n"] > 0 for t in traces)
    whole = hit_rates(watched)
    assert page.locator("#group-banner").count() == 0
    save_screenshot(page, tmp_path, "groups")

    # Clicking a value selects it: in the URL, and in every time panel.
    summary.locator("a").click()
    page.wait_for_url(lambda url: "group_value=summary" in url)
    watched.drawn()
    selected = {"group_by": "scenario", "group_value": "summary"}
    assert params_of(page.url) == {**VIEW, **selected, "groups": "scenario"}
    metrics = fetch(page, "/v1/metrics", scenario="summary", **VIEW)["buckets"]
    drawn = watched.figures()
    assert drawn["hit_rate"]["traces"][0]["y"] == [round(b["hit_rate"], 4) for b in metrics]
    assert hit_rates(watched) != whole
    x = page.evaluate(
        "() => Array.from(document.querySelector('[data-figure=hit_rate]').data[0].x)"
    )
    assert x == [plot_ts(b["ts"]) for b in metrics]
    assert "scenario summary" in (page.text_content("#panel-hit_rate h2") or "")
    banner = page.text_content("#group-banner") or ""
    assert banner.startswith("Showing scenario summary of svc · all models")
    assert page.locator("#panel-prefixes .scope-label").is_visible()  # not narrowed
    assert page.locator('#groups tbody tr.selected[data-value="summary"]').count() == 1
    assert page.input_value("#group-by") == "scenario"
    assert page.input_value("#group-value") == "summary"
    save_screenshot(page, tmp_path, "group-selected")

    # A tab lists another field in place: the URL keeps it, the page is not reloaded.
    page.evaluate("() => { window.stayed = true; }")
    page.click('#groups-tabs a[data-by="tenant"]')
    page.wait_for_function(
        "() => document.querySelector('#groups tbody tr')?.dataset.value?.startsWith('tenant-')"
    )
    assert params_of(page.url)["groups"] == "tenant"
    assert page.evaluate("() => window.stayed") is True
    assert page.locator("#groups tbody tr").count() == 4
    assert "Not narrowed to scenario `summary`" in (page.text_content("#groups-sub") or "")

    # "none" in the selector: back to every request, the tab kept.
    page.select_option("#group-by", "")
    page.wait_for_url(lambda url: "group_by=" not in url)
    watched.drawn()
    assert params_of(page.url) == {**VIEW, "groups": "tenant"}
    assert hit_rates(watched) == whole
    assert watched.errors == [] and watched.dialogs == []


def test_the_selector_takes_a_typed_value_and_refuses_a_value_without_a_field(
    server: str, watched: Watched
) -> None:
    page = watched.page
    page.goto(server + "/?" + urlencode(VIEW))
    watched.drawn()
    page.select_option("#group-by", "deploy")
    page.fill("#group-value", "v2")
    page.press("#group-value", "Enter")
    page.wait_for_url(lambda url: "group_by=deploy&group_value=v2" in url)
    watched.drawn()
    metrics = fetch(page, "/v1/metrics", deploy="v2", **VIEW)["buckets"]
    assert hit_rates(watched) == [round(b["hit_rate"], 4) for b in metrics]
    assert set(hit_rates(watched)) == {0.0}  # the broken canary, alone
    assert watched.errors == [] and watched.dialogs == []

    # A value without its field: the page says why (400, the browser logs the status).
    answer = page.goto(server + "/?" + urlencode({**VIEW, "group_value": "chat"}))
    assert answer is not None and answer.status == 400
    assert "`group_value` needs `group_by`" in (page.text_content(".error") or "")
    watched.drawn()  # the page still draws, with the view's other parameters dropped
    assert [e for e in watched.errors if "status of 400" not in e] == []
