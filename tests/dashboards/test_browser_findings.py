"""The findings panel in a real browser (Playwright driving Debian's chromium) against
a real `cachewatch serve` holding the demo's traffic (`service.demo`: its scenario,
its models file), whose corporate assistant renders its system prompt two ways from
the first minute (scenarios web-chat and api-agent): a standing template drift that
no release introduced and no regression shows."""

import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from html import unescape
from pathlib import Path
from typing import Any

import httpx
import pytest
from markdown_it import MarkdownIt

from service import migrate
from service.alerts.wording import FINDING_TITLES
from service.db import make_engine, make_sessionmaker
from service.demo import SERVICE, demo_scenario, models_file
from service.services.analytics_pass import catch_up
from service.settings import Settings
from service.simulate import simulate
from tests.conftest import (
    PROJECT_ROOT,
    LiveServer,
    drop_database,
    fresh_database_url,
    make_live_server,
)
from tests.dashboards.browser import Watched, chromium, require_chromium, save_screenshot
from tests.simulated import load_records

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class DemoServer:
    url: str
    database_url: str
    models_file: Path


@pytest.fixture(scope="module")
def demo_server(
    tmp_path_factory: pytest.TempPathFactory, database_url: str
) -> Iterator[DemoServer]:
    """A live server (public read, as the demo serves) on the demo's records and events,
    caught up by the analytics pass with the demo's prices."""
    require_chromium()
    folder = tmp_path_factory.mktemp("findings")
    url = fresh_database_url(folder, "findings")
    scenario = demo_scenario()
    models = folder / "models.toml"
    models.write_text(models_file(scenario), encoding="utf-8")
    settings = Settings(database_url=url, run_jobs=False, models_file=models)
    engine = make_engine(settings)
    migrate.upgrade(engine)
    result = simulate(scenario)
    factory = make_sessionmaker(engine)
    with factory.begin() as session:
        load_records(session, result.records, result.events)
    with factory.begin() as session:
        catch_up(session, settings)
    engine.dispose()
    live: LiveServer = make_live_server(
        folder, url, run_jobs="false", models_file=str(models), public_read="true"
    )
    live.start()
    try:
        yield DemoServer(live.url, url, models)
    finally:
        live.stop()
        drop_database(url)


@pytest.fixture
def watched(demo_server: DemoServer) -> Iterator[Watched]:
    with chromium() as browser:
        page = Watched(browser)
        try:
            yield page
        finally:
            page.close()


def test_the_panel_shows_the_demos_template_drift_with_its_evidence_and_fix(
    demo_server: DemoServer, watched: Watched, tmp_path: Path
) -> None:
    page = watched.page
    page.goto(demo_server.url + "/")
    watched.drawn()

    # At the top: above the headline and every other panel.
    panel = page.locator("#panel-findings")
    assert panel.locator("h2").text_content() == "What is costing you cache now"
    top = panel.bounding_box()
    headline = page.locator(".headline").bounding_box()
    assert top is not None and headline is not None and top["y"] < headline["y"]

    payload: dict[str, Any] = page.evaluate(
        "async () => (await fetch('/dashboard/data/findings')).json()"
    )
    rows = payload["findings"]
    shown = panel.locator("details.finding")
    assert shown.count() == len(rows) >= 1
    assert [d.get_attribute("data-kind") for d in shown.all()] == [r["kind"] for r in rows]

    (drift,) = [r for r in rows if r["kind"] == "template_drift" and r["segment"] == "system"]
    assert drift["service"] == SERVICE
    item = panel.locator("details.finding[data-kind=template_drift]").nth(
        [r for r in rows if r["kind"] == "template_drift"].index(drift)
    )
    cells = item.locator("summary > span").all_text_contents()
    assert cells[:3] == ["template_drift", f"{SERVICE} · {drift['model']}", "system"]
    assert cells[5] == drift["cost"] and cells[5].endswith("/day")  # the demo has prices

    # Folded until opened: the evidence and the fix show on a click.
    evidence = item.locator(".finding-body li")
    fix = item.locator(".finding-body .fix")
    assert not evidence.first.is_visible() and not fix.is_visible()
    item.locator("summary").click()
    assert item.get_attribute("open") is not None
    assert evidence.all_text_contents() == drift["evidence"]
    assert all(line.is_visible() for line in evidence.all())
    text = "\n".join(drift["evidence"])
    assert "scenario `web-chat`" in text and "scenario `api-agent`" in text
    assert fix.is_visible() and fix.text_content() == "Fix: " + drift["fix"]
    save_screenshot(page, tmp_path, "findings")
    assert watched.errors == [] and watched.dialogs == []


def test_the_report_commands_markdown_renders_the_panels_findings(
    demo_server: DemoServer,
) -> None:
    """`cachewatch report` on the same database: its Markdown, rendered, holds every
    finding of the panel (kind, service, segment), worst first as the panel lists
    them, with the drift's evidence and fix."""
    panel = httpx.get(demo_server.url + "/dashboard/data/findings", timeout=60).json()
    env = {
        "PATH": "/usr/bin:/bin",
        "CACHEWATCH_DATABASE_URL": demo_server.database_url,
        "CACHEWATCH_MODELS_FILE": str(demo_server.models_file),
    }
    run = subprocess.run(
        [sys.executable, "-m", "service.cli", "report", "--markdown"],
        env=env,
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    html = MarkdownIt().render(run.stdout)
    headings = [h for h in re.findall(r"<h2>(.*?)</h2>", html) if "Regression" not in h]
    assert len(headings) == len(panel["findings"]) >= 1
    for heading, row in zip(headings, panel["findings"], strict=True):
        assert (
            FINDING_TITLES[row["kind"]] in heading and f"<code>{row['service']}</code>" in heading
        )
        if row["segment"]:
            assert f"<code>{row['segment']}</code>" in heading
    (drift,) = [r for r in panel["findings"] if r["kind"] == "template_drift"]
    text = unescape(re.sub(r"<[^>]+>", "", html))
    assert all(_plain(line) in text for line in drift["evidence"])
    assert _plain(drift["fix"]) in text


def _plain(markdown: str) -> str:
    """A finding's line as rendered text: its `code` spans lose their backticks."""
    return markdown.replace("`", "")
