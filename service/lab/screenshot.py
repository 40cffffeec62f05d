"""A screenshot of the run's dashboard (Debian's chromium through Playwright, as the
browser tests drive it), saved beside the run's results."""

from __future__ import annotations

from pathlib import Path

from dashboards.chromium import CHROMIUM, CHROMIUM_ARGS


def dashboard(url: str, out: Path) -> Path | None:
    """The page at `url`, full height, once its charts are drawn; None (and a line
    saying why) without chromium or Playwright: the run's numbers do not need it."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("no screenshot: Playwright is not installed (make install)")
        return None
    if not Path(CHROMIUM).exists():
        print(f"no screenshot: {CHROMIUM} is missing (apt-get install chromium)")
        return None
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(url, wait_until="networkidle")
            page.wait_for_timeout(1500)
            page.screenshot(path=str(out), full_page=True)
        finally:
            browser.close()
    return out
