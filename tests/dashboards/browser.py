"""What the browser tests share: Debian's chromium driven by Playwright, a page whose
errors and dialogs are recorded, and screenshots (to the test's tmp_path, and also to
$CACHEWATCH_TEST_OUTPUT when set)."""

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from dashboards.chromium import CHROMIUM, CHROMIUM_ARGS
from tests.conftest import is_postgres_run, skip_or_fail


def require_chromium() -> None:
    """Skip (fail under CI) without chromium or Playwright."""
    if not Path(CHROMIUM).exists():
        skip_or_fail(f"{CHROMIUM} is missing: the browser tests need Debian's chromium")
    pytest.importorskip("playwright.sync_api")


@contextmanager
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


class Watched:
    """A page whose console errors, page errors and dialogs are recorded."""

    def __init__(self, browser: Any) -> None:
        self.context = browser.new_context(viewport={"width": 1400, "height": 900})
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("dialog", self._dialog)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def drawn(self) -> None:
        """Wait until every panel has been drawn (or failed)."""
        self.page.wait_for_function("() => document.body.dataset.drawn", timeout=60_000)
        state = self.page.evaluate("() => document.body.dataset.drawn")
        assert state == "true", self.page.text_content("#view-line")

    def login(self, base: str, token: str, path: str = "/") -> None:
        self.page.goto(base + path)
        assert "/login" in self.page.url
        self.page.fill("#token", token)
        self.page.click("button[type=submit]")
        self.page.wait_for_url(lambda url: "/login" not in url)
        self.drawn()

    def figures(self) -> dict[str, dict[str, Any]]:
        """Per panel: what Plotly drew (its data and layout, and SVG counts)."""
        return self.page.evaluate(
            """() => Object.fromEntries(Array.from(document.querySelectorAll('[data-figure]'))
                .map((div) => [div.dataset.figure, {
                    traces: (div.data || []).map((t) => ({
                        name: t.name,
                        n: (t.y || []).filter((v) => v !== null && v !== undefined).length,
                        y: Array.from(t.y || []),
                    })),
                    shapes: ((div.layout || {}).shapes || []).map((s) => [s.type, s.name]),
                    annotations: ((div.layout || {}).annotations || []).map((a) => a.text),
                    svgTraces: div.querySelectorAll(
                        '.scatterlayer .trace, .barlayer .trace').length,
                    svgText: Array.from(div.querySelectorAll('text')).map((t) => t.textContent),
                }]))"""
        )

    def close(self) -> None:
        self.context.close()


def save_screenshot(page: Any, tmp_path: Path, name: str) -> Path:
    path = tmp_path / f"{name}-{'postgresql' if is_postgres_run() else 'sqlite'}.png"
    page.screenshot(path=str(path), full_page=True)
    if os.environ.get("CACHEWATCH_TEST_OUTPUT"):
        out = Path(os.environ["CACHEWATCH_TEST_OUTPUT"])
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, out / path.name)
    print(f"screenshot: {path}")
    return path
