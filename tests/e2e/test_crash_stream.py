"""Crash safety under a real stream: syslog-ng ships 100,000 records while the
server is killed with SIGKILL twice and restarted; at the end every record is
stored exactly once (on the backend the suite runs: SQLite or PostgreSQL).

A batch in flight at the kill is either committed (and its retry deduplicated) or
rolled back (and its retry stored): both must come out as exactly once."""

import threading
import time

import pytest

from tests.conftest import LiveServer
from tests.e2e.syslog import (
    Shipper,
    append_slowly,
    assert_stored_exactly_once,
    stored_count,
    usage_line,
    wait_for_count,
    wait_for_count_at_least,
)

RECORDS = 100_000
IN_FILE_AT_START = 20_000
KILL_AT = (25_000, 60_000)  # stored counts at which the server is killed
DOWN_S = 1.5  # syslog-ng meets refused connections and keeps its batches
DELIVERY_TIMEOUT_S = 180


@pytest.mark.slow
def test_two_sigkills_during_a_100k_stream_lose_and_duplicate_nothing(
    live_server: LiveServer, shipped: Shipper
) -> None:
    lines = [usage_line(i) for i in range(RECORDS)]
    shipped.ndjson.write_bytes(b"".join(line + b"\n" for line in lines[:IN_FILE_AT_START]))
    seen_at_kill: list[int] = []
    started = time.monotonic()
    with shipped.run() as log_path:
        writer = threading.Thread(
            target=append_slowly,
            args=(shipped.ndjson, lines[IN_FILE_AT_START:], 2000, 0.1),
            daemon=True,
        )
        writer.start()
        for threshold in KILL_AT:
            wait_for_count_at_least(shipped.engine, threshold, DELIVERY_TIMEOUT_S)
            live_server.kill()
            seen_at_kill.append(stored_count(shipped.engine))
            time.sleep(DOWN_S)
            live_server.start()
        writer.join(60)
        wait_for_count(shipped.engine, RECORDS, log_path, DELIVERY_TIMEOUT_S)
        time.sleep(1)  # a late retry of an acknowledged batch must not add rows
    elapsed = time.monotonic() - started
    assert all(seen < RECORDS for seen in seen_at_kill), f"kills came too late: {seen_at_kill}"
    assert_stored_exactly_once(shipped.engine, RECORDS)
    # Both kills really interrupted the stream: the server logged a restart after each.
    assert live_server.log_path is not None
    assert live_server.log_path.read_text().count("Application startup complete") == 3
    print(f"100k records through 2 kills in {elapsed:.0f}s; stored at the kills: {seen_at_kill}")
