"""The shipper's flush at interpreter exit (`shipper.py`, step 4 of its protocol):
an application that records calls and ends without calling `flush()` loses none of
them, and with cachewatch down its exit waits no longer than `exit_timeout_s`.
Each case is a real Python process that exits on its own."""

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

from tests.client.fake_cachewatch import FakeCachewatch
from tests.conftest import is_postgres_run

pytestmark = pytest.mark.skipif(is_postgres_run(), reason="touches no database: run once")

CALLS = 250
APPLICATION = """
import os, time
import cachewatch_client
# No flush: records are still in the queue (a 60 s batch interval) at exit.
shipper = cachewatch_client.configure(
    url=os.environ["URL"], service="exiting", flush_interval_s=60.0, exit_timeout_s=1.0
)
for i in range({calls}):
    cachewatch_client.record(
        {{"model": "m", "messages": [{{"role": "user", "content": f"hi {{i}}"}}]}},
        {{"id": f"exit-{{i}}", "usage": {{"prompt_tokens": 10}}}},
        started=time.time(),
    )
"""


@pytest.fixture
def cachewatch() -> Iterator[FakeCachewatch]:
    fake = FakeCachewatch()
    yield fake
    fake.stop()


def run_application(url: str) -> float:
    """Seconds the application took, its exit included."""
    started = time.monotonic()
    subprocess.run(
        [sys.executable, "-c", textwrap.dedent(APPLICATION.format(calls=CALLS))],
        env={"URL": url, "PATH": "/usr/bin:/bin"},
        check=True,
        timeout=60,
    )
    return time.monotonic() - started


def test_records_queued_at_exit_are_sent(cachewatch: FakeCachewatch) -> None:
    cachewatch.start()
    run_application(cachewatch.url)
    assert sorted(cachewatch.store) == sorted(f"exit-{i}" for i in range(CALLS))


def test_with_cachewatch_down_the_exit_waits_at_most_its_timeout(
    cachewatch: FakeCachewatch,
) -> None:
    """Nothing listens: the flush gives up after `exit_timeout_s` (1 s here); the
    process's own start and imports take the rest."""
    baseline = time.monotonic()
    subprocess.run([sys.executable, "-c", "import cachewatch_client"], check=True, timeout=60)
    startup = time.monotonic() - baseline
    assert run_application(cachewatch.url) < startup + 1.0 + 1.5
    assert cachewatch.store == {}
