"""A real log shipper end to end: syslog-ng tails an NDJSON file and its http()
destination posts batches to a live `cachewatch serve`; every record must be stored
exactly once."""

import threading
import time

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

RECORDS_BEFORE_START = 3000  # in the file when syslog-ng starts: read from the top
RECORDS_APPENDED = 2000  # appended while it runs: picked up by following the file
DELIVERY_TIMEOUT_S = 90


def test_syslog_ng_ships_every_record_exactly_once(
    live_server: LiveServer, shipped: Shipper
) -> None:
    count = RECORDS_BEFORE_START + RECORDS_APPENDED
    lines = [usage_line(i) for i in range(count)]
    shipped.ndjson.write_bytes(b"".join(line + b"\n" for line in lines[:RECORDS_BEFORE_START]))
    with shipped.run() as log_path:
        time.sleep(0.5)
        append_slowly(shipped.ndjson, lines[RECORDS_BEFORE_START:], piece=250, pause_s=0.05)
        wait_for_count(shipped.engine, count, log_path, DELIVERY_TIMEOUT_S)
        time.sleep(1)  # a late retry of an acknowledged batch must not add rows
    assert_stored_exactly_once(shipped.engine, count)

    # It batched: far fewer POSTs than records (uvicorn logs one line per request).
    assert live_server.log_path is not None
    posts = live_server.log_path.read_text().count('"POST /v1/usage HTTP/1.1" 200')
    assert 0 < posts <= count // 10, f"{posts} POSTs for {count} records"


def test_server_crash_mid_stream_loses_and_duplicates_nothing(
    live_server: LiveServer, shipped: Shipper
) -> None:
    """kill -9 the server while syslog-ng is shipping: an unacknowledged batch is
    rolled back and resent after the restart; nothing acknowledged is lost."""
    count = 4000
    lines = [usage_line(i) for i in range(count)]
    shipped.ndjson.touch()
    with shipped.run() as log_path:
        writer = threading.Thread(
            target=append_slowly, args=(shipped.ndjson, lines, 100, 0.05), daemon=True
        )
        writer.start()
        wait_for_count_at_least(shipped.engine, 1000, timeout_s=DELIVERY_TIMEOUT_S)
        live_server.kill()
        before_restart = stored_count(shipped.engine)
        time.sleep(1.5)  # syslog-ng meets a refused connection and keeps the batch
        live_server.start()
        writer.join(60)
        wait_for_count(shipped.engine, count, log_path, DELIVERY_TIMEOUT_S)
        time.sleep(1)
    assert before_restart < count, "the crash came too late to test anything"
    assert_stored_exactly_once(shipped.engine, count)
