"""How the project drives Debian's chromium headless (the browser tests, the dashboard
bench and the lab's screenshot): where it is, and the flags this closed network
needs (without the background-networking ones chromium keeps dialing Google's
hosts and has its connections refused)."""

from typing import Final

CHROMIUM: Final = "/usr/bin/chromium"
CHROMIUM_ARGS: Final = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
