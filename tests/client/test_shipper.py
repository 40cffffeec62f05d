"""The shipper (cachewatch_client.shipper) against a fake cachewatch
(tests/client/fake_cachewatch.py): a real HTTP server on loopback whose answers a
test scripts (200 with the real service's counts, 503 with Retry-After, 429, 4xx,
slow answers, or no server at all), and once against a real `cachewatch serve`."""

from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import multiprocessing
import os
import select
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine
from sqlalchemy import select as sql_select
from sqlalchemy.orm import Session

import cachewatch_client
from cachewatch_client import Labels, Settings, Shipper
from cachewatch_client.calls import Call
from cachewatch_client.replies import Reply
from service.models import UsageRecord
from service.services.tokens import Scope, create_token
from tests.client.fake_cachewatch import Answer, FakeCachewatch
from tests.conftest import LiveServer, is_postgres_run

pytestmark = pytest.mark.skipif(is_postgres_run(), reason="touches no database: run once")

TOKEN = "cw_test_token"
USAGE: dict[str, Any] = {
    "prompt_tokens": 120,
    "completion_tokens": 5,
    "prompt_tokens_details": {"cached_tokens": 64},
}


# --- a fake cachewatch (tests/client/fake_cachewatch.py) --------------------------------


@pytest.fixture
def fake() -> Iterator[FakeCachewatch]:
    """A cachewatch that answers what a test scripts (`answer`, `set_mode`), else 200."""
    server = FakeCachewatch(token=TOKEN).start()
    yield server
    server.stop()


@pytest.fixture
def down() -> Iterator[FakeCachewatch]:
    """A cachewatch that is not running yet: its port is closed until `.start()`."""
    server = FakeCachewatch(token=TOKEN)
    yield server
    server.stop()


# --- the client's side ----------------------------------------------------------------


def settings_for(url: str | None, **tuning: Any) -> Settings:
    small: dict[str, Any] = {
        "retry_base_s": 0.01,
        "retry_max_s": 0.05,
        "flush_interval_s": 0.05,
        "timeout_s": 2.0,
        "exit_timeout_s": 0.5,
    }
    settings = Settings.resolve(url=url or "http://unused", token=TOKEN, service="s")
    return dataclasses.replace(settings, url=url, **{**small, **tuning})


ShipperFactory = Callable[..., Shipper]


@pytest.fixture
def make_shipper() -> Iterator[ShipperFactory]:
    """Shippers closed after the test (bounded: their cachewatch may be down)."""
    made: list[Shipper] = []

    def make(
        url: str | None,
        *,
        on_record: Callable[[dict[str, Any]], None] | None = None,
        transport: httpx.BaseTransport | None = None,
        **tuning: Any,
    ) -> Shipper:
        shipper = Shipper(settings_for(url, **tuning), on_record=on_record, transport=transport)
        made.append(shipper)
        return shipper

    yield make
    for shipper in made:
        shipper.close(0.1)


def call(
    rid: str,
    *,
    usage: dict[str, Any] | None = None,
    request: bytes | dict[str, Any] | None = None,
    model: str | None = "m",
    **fields: Any,
) -> Call:
    values: dict[str, Any] = {
        "request": request if request is not None else message_request(rid),
        "reply": Reply(rid, model, USAGE if usage is None else usage),
        "started": time.time(),
        "labels": Labels(),
        "service": "s",
        "block_size": 16,
        **fields,
    }
    return Call(**values)


def message_request(text: str) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [
            {"role": "system", "content": "You are terse. " * 10},
            {"role": "user", "content": text},
        ],
    }


def calls(n: int, prefix: str = "r") -> list[Call]:
    return [call(f"{prefix}-{i}") for i in range(n)]


def wait_until(check: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting")
        time.sleep(0.005)


def stuck(shipper: Shipper, first: Call) -> None:
    """Make `shipper`'s thread hold `first` in its retry loop (cachewatch down,
    batch_size 1): from then on the queue only fills."""
    assert shipper.submit(first)
    wait_until(lambda: shipper.stats().retries >= 1)


# --- batching, body and headers -------------------------------------------------------


def test_batches_by_size_then_by_time(fake: FakeCachewatch, make_shipper: ShipperFactory) -> None:
    shipper = make_shipper(fake.url, batch_size=5, flush_interval_s=0.5)
    started = time.monotonic()
    for c in calls(12):
        assert shipper.submit(c)
    wait_until(lambda: len(fake.posts) == 2)
    assert [len(p.records) for p in fake.posts] == [5, 5]
    assert fake.posts[1].at - started < 0.4  # full batches go at once
    wait_until(lambda: len(fake.posts) == 3)
    assert len(fake.posts[2].records) == 2
    assert fake.posts[2].at - started >= 0.48  # the partial one waited for its interval
    assert shipper.flush(2)
    assert shipper.stats() == cachewatch_client.ShipperStats(queued=12, sent=12)


def test_batches_by_time(fake: FakeCachewatch, make_shipper: ShipperFactory) -> None:
    shipper = make_shipper(fake.url, batch_size=500, flush_interval_s=0.2)
    first = time.monotonic()
    assert shipper.submit(call("a"))
    time.sleep(0.05)
    assert shipper.submit(call("b"))
    wait_until(lambda: len(fake.posts) == 1)
    (post,) = fake.posts
    assert [r["request_id"] for r in post.records] == ["a", "b"]
    # `flush_interval_s` after the batch's first record, not its last.
    assert 0.18 <= post.at - first < 0.5
    assert shipper.submit(call("c"))
    wait_until(lambda: len(fake.posts) == 2)
    assert [r["request_id"] for r in fake.posts[1].records] == ["c"]


def test_body_is_gzip_ndjson_with_bearer_token(
    fake: FakeCachewatch, make_shipper: ShipperFactory
) -> None:
    seen: list[dict[str, Any]] = []
    shipper = make_shipper(fake.url, on_record=seen.append, batch_size=3)
    for c in calls(3):
        shipper.submit(c)
    assert shipper.flush(2)
    (post,) = fake.posts
    assert post.headers["authorization"] == f"Bearer {TOKEN}"
    assert post.headers["content-encoding"] == "gzip"
    assert post.headers["content-type"] == "application/x-ndjson"
    assert post.headers["user-agent"] == f"cachewatch-client/{cachewatch_client.__version__}"
    assert post.body[:2] == b"\x1f\x8b"
    lines = gzip.decompress(post.body).split(b"\n")
    assert [json.loads(line) for line in lines] == seen == post.records
    assert [r["request_id"] for r in seen] == ["r-0", "r-1", "r-2"]
    assert all(r["usage"] == USAGE and r["service"] == "s" for r in seen)


def test_no_token_sends_no_authorization(
    fake: FakeCachewatch, make_shipper: ShipperFactory
) -> None:
    shipper = make_shipper(fake.url, token=None)
    shipper.submit(call("a"))
    assert shipper.flush(2)
    assert "authorization" not in fake.posts[0].headers
    assert fake.statuses() == [401]  # the fake, like cachewatch, wants a token
    assert shipper.stats().dropped == 1


def test_on_record_receives_every_record(
    fake: FakeCachewatch, make_shipper: ShipperFactory
) -> None:
    seen: list[dict[str, Any]] = []
    shipper = make_shipper(fake.url, on_record=seen.append, batch_size=4)
    for c in calls(10):
        shipper.submit(c)
    assert shipper.flush(2)
    assert [r["request_id"] for r in seen] == [f"r-{i}" for i in range(10)]
    assert {r["request_id"]: r for r in seen} == fake.store


def test_record_goes_through_the_given_shipper(
    fake: FakeCachewatch, make_shipper: ShipperFactory
) -> None:
    shipper = make_shipper(fake.url)
    started = time.time()
    assert cachewatch_client.record(
        message_request("hi"),
        {"id": "chatcmpl-1", "model": "m-2024", "usage": USAGE},
        started=started,
        first_token=started + 0.25,
        finished=started + 1,
        session_id="conv-1",
        shipper=shipper,
    )
    assert shipper.flush(2)
    record = fake.store["chatcmpl-1"]
    assert record["ttft_ms"] == 250.0 and record["latency_ms"] == 1000.0
    assert record["session_id"] == "conv-1" and record["model"] == "m"
    assert not cachewatch_client.record({}, 42, started=started, shipper=shipper)
    assert shipper.stats().errors == 1


# --- retries ----------------------------------------------------------------------------


def test_down_then_back_loses_nothing(down: FakeCachewatch, make_shipper: ShipperFactory) -> None:
    shipper = make_shipper(down.url, batch_size=7)
    for c in calls(20, "early"):
        assert shipper.submit(c)
    wait_until(lambda: shipper.stats().retries >= 3)
    for c in calls(30, "late"):
        assert shipper.submit(c)
    assert not shipper.flush(0.1)
    down.start()
    assert shipper.flush(5)
    expected = {f"early-{i}" for i in range(20)} | {f"late-{i}" for i in range(30)}
    assert set(down.store) == expected
    assert set(down.posted.values()) == {1}  # each request_id posted (stored) exactly once
    stats = shipper.stats()
    assert (stats.queued, stats.sent, stats.duplicates, stats.dropped) == (50, 50, 0, 0)
    assert stats.retries >= 3


@pytest.mark.parametrize("status", [429, 503, 500, 502, 504, 408])
def test_busy_then_200_is_retried(
    fake: FakeCachewatch, make_shipper: ShipperFactory, status: int
) -> None:
    fake.answer(Answer(status, {"Retry-After": "0"}), Answer(status))
    shipper = make_shipper(fake.url, batch_size=3)
    for c in calls(3):
        shipper.submit(c)
    assert shipper.flush(3)
    assert fake.statuses() == [status, status, 200]
    assert fake.posts[0].body == fake.posts[2].body  # the same batch, posted again
    stats = shipper.stats()
    assert (stats.sent, stats.retries, stats.dropped, stats.duplicates) == (3, 2, 0, 0)
    assert fake.posted == Counter({"r-0": 1, "r-1": 1, "r-2": 1})  # stored once each


@pytest.mark.parametrize("status", [501, 520, 530])
def test_any_5xx_is_retried(
    fake: FakeCachewatch, make_shipper: ShipperFactory, status: int
) -> None:
    """The delivery protocol: "On 429, 503, any 5xx, a timeout or no connection it
    is posted again" (a proxy's 520-530 in front of cachewatch too)."""
    fake.answer(Answer(status))
    shipper = make_shipper(fake.url)
    shipper.submit(call("a"))
    assert shipper.flush(3)
    assert fake.statuses() == [status, 200]
    assert shipper.stats().sent == 1 and shipper.stats().dropped == 0


def test_retry_after_is_honoured(fake: FakeCachewatch, make_shipper: ShipperFactory) -> None:
    fake.answer(Answer(503, {"Retry-After": "0.3"}))
    shipper = make_shipper(fake.url, retry_base_s=0.001, retry_max_s=2.0)
    shipper.submit(call("a"))
    assert shipper.flush(3)
    first, second = fake.posts
    assert 0.28 <= second.at - first.at < 1.0
    assert shipper.stats().retries == 1


def test_retry_after_is_bounded_by_retry_max(
    fake: FakeCachewatch, make_shipper: ShipperFactory
) -> None:
    fake.answer(Answer(429, {"Retry-After": "3600"}), Answer(503, {"Retry-After": "not-a-number"}))
    shipper = make_shipper(fake.url, retry_base_s=0.01, retry_max_s=0.1)
    shipper.submit(call("a"))
    assert shipper.flush(3)
    first, second, third = fake.posts
    assert 0.09 <= second.at - first.at < 0.5  # retry_max_s, not an hour
    assert third.at - second.at < 0.5  # an unreadable Retry-After: the usual backoff
    assert shipper.stats().retries == 2 and shipper.stats().sent == 1


def test_backoff_grows_within_bounds(make_shipper: ShipperFactory, down: FakeCachewatch) -> None:
    shipper = make_shipper(down.url, retry_base_s=0.01, retry_max_s=0.04)
    for attempt in range(40):
        waits = [shipper._backoff(attempt, None) for _ in range(50)]
        assert all(0 <= w <= min(0.04, 0.01 * 2**attempt) for w in waits)
    assert shipper._backoff(10_000, None) <= 0.04


def test_slow_answer_is_retried_and_counted_as_duplicates(
    fake: FakeCachewatch, make_shipper: ShipperFactory
) -> None:
    """The first answer comes after the client's timeout: the batch was stored but
    the client does not know, posts it again, and the service counts duplicates."""
    fake.answer(Answer(200, delay_s=0.6))
    shipper = make_shipper(fake.url, timeout_s=0.2, batch_size=4)
    for c in calls(4):
        shipper.submit(c)
    assert shipper.flush(5)
    assert fake.statuses() == [200, 200]
    stats = shipper.stats()
    assert (stats.sent, stats.duplicates, stats.retries, stats.dropped) == (0, 4, 1, 0)
    # Posted twice, answered 200 twice, stored once.
    assert set(fake.posted.values()) == {2} and len(fake.store) == 4


@pytest.mark.parametrize("status", [400, 401, 403, 404, 413])
def test_refused_batch_is_dropped_not_retried(
    fake: FakeCachewatch,
    make_shipper: ShipperFactory,
    status: int,
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake.answer(Answer(status), Answer(status))
    shipper = make_shipper(fake.url, batch_size=3)
    with caplog.at_level(logging.WARNING, "cachewatch_client"):
        for c in calls(6):
            shipper.submit(c)
        assert shipper.flush(3)
    assert fake.statuses() == [status, status]
    stats = shipper.stats()
    assert (stats.dropped, stats.retries, stats.sent) == (6, 0, 0)
    assert len([r for r in caplog.records if f"{status}" in r.getMessage()]) == 1  # once
    # The thread lives on: the next batch is delivered.
    shipper.submit(call("after"))
    assert shipper.flush(3)
    assert list(fake.store) == ["after"]


def test_odd_200_answers_keep_the_thread_alive(
    fake: FakeCachewatch, make_shipper: ShipperFactory
) -> None:
    """A 200 that is not the service's JSON (a proxy's page, a list): nothing to
    count from it, but the shipper must go on."""
    answers = iter([b"<html>ok</html>", b"[1, 2]"])
    real = fake.handle

    def odd(path: str, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        status, extra, payload = real(path, headers, body)
        return status, extra, next(answers, payload)

    fake.handle = odd  # type: ignore[method-assign]
    shipper = make_shipper(fake.url)
    for name in ("a", "b", "c"):
        shipper.submit(call(name))
        assert shipper.flush(3)
    assert shipper.stats().sent == 1  # the third answer, the service's counts
    assert shipper.stats().errors == 2
    assert list(fake.store) == ["a", "b", "c"]


# --- bounds: the queue, its bytes, never blocking ---------------------------------------


def test_queue_full_drops_and_never_blocks(
    down: FakeCachewatch, make_shipper: ShipperFactory
) -> None:
    shipper = make_shipper(down.url, max_queue=5, batch_size=1)
    stuck(shipper, call("first"))
    many = calls(10_000, "x")
    started = time.perf_counter()
    results = [shipper.submit(c) for c in many]
    elapsed = time.perf_counter() - started
    assert elapsed < 0.5
    assert results == [True] * 5 + [False] * 9_995
    stats = shipper.stats()
    assert (stats.queued, stats.dropped) == (6, 9_995)
    # Back up: what the queue kept arrives, the first call included.
    down.start()
    assert shipper.flush(5)
    assert set(down.store) == {"first"} | {f"x-{i}" for i in range(5)}


def test_queue_bytes_bound(down: FakeCachewatch, make_shipper: ShipperFactory) -> None:
    shipper = make_shipper(down.url, max_queue_bytes=1_000, batch_size=1)
    stuck(shipper, call("first"))

    def sized(rid: str, size: int) -> Call:
        text = json.dumps({"model": "m", "messages": [{"role": "user", "content": rid}]}).encode()
        return call(rid, request=text + b" " * (size - len(text)))

    assert [shipper.submit(sized(f"big-{i}", 300)) for i in range(4)] == [True] * 3 + [False]
    assert shipper.submit(sized("small", 100))  # 1000 bytes held: still within the bound
    assert not shipper.submit(sized("one-more", 100))
    assert not shipper.submit(sized("huge", 5_000))
    stats = shipper.stats()
    assert (stats.queued, stats.dropped) == (5, 3)
    down.start()
    assert shipper.flush(5)
    assert set(down.store) == {"first", "small", "big-0", "big-1", "big-2"}
    # Sent, their bytes are free again.
    assert shipper.submit(sized("later", 900))


def test_submit_never_raises(fake: FakeCachewatch, make_shipper: ShipperFactory) -> None:
    shipper = make_shipper(fake.url, batch_size=10)
    bad = [
        call("not-json", request=b"{not json"),
        call("a-list", request=b"[1, 2]"),
        call("no-model", request={"messages": []}, model=None),
        call("bad-bytes", request=b"\xff\xfe"),
    ]
    assert all(shipper.submit(c) for c in bad)  # queued: parsed on the thread
    unsized = call("unsized", events=[123])
    assert not shipper.submit(unsized)  # its size cannot be taken: counted, not raised
    assert shipper.submit(call("good"))
    assert shipper.flush(3)
    assert list(fake.store) == ["good"]
    stats = shipper.stats()
    assert (stats.errors, stats.queued, stats.sent) == (5, 5, 1)


def test_unserialisable_record_is_an_error_not_a_dead_thread(
    fake: FakeCachewatch, make_shipper: ShipperFactory
) -> None:
    """`record(attributes=...)` takes any values: one that JSON cannot carry costs
    that record, not its batch nor the shipper."""
    shipper = make_shipper(fake.url, batch_size=3)
    shipper.submit(call("ok-1"))
    shipper.submit(call("bad", attributes={"when": object()}))
    shipper.submit(call("nan", attributes={"x": float("nan")}))
    assert shipper.flush(3)
    shipper.submit(call("ok-2"))
    assert shipper.flush(3)
    assert set(fake.store) == {"ok-1", "ok-2"}
    stats = shipper.stats()
    assert (stats.sent, stats.errors) == (2, 2)


def test_raising_on_record_is_an_error_not_a_dead_thread(
    fake: FakeCachewatch, make_shipper: ShipperFactory
) -> None:
    def on_record(record: dict[str, Any]) -> None:
        if record["request_id"] == "boom":
            raise RuntimeError("the callback failed")

    shipper = make_shipper(fake.url, on_record=on_record)
    for name in ("a", "boom", "b"):
        shipper.submit(call(name))
    assert shipper.flush(3)
    assert set(fake.store) == {"a", "boom", "b"}  # the record is still sent
    assert shipper.stats().errors == 1


def test_skipped_without_usage(fake: FakeCachewatch, make_shipper: ShipperFactory) -> None:
    shipper = make_shipper(fake.url)
    no_usage = Call(
        request=message_request("x"),
        reply=Reply("id", "m", None),
        started=time.time(),
        labels=Labels(),
        service="s",
        block_size=16,
    )
    assert shipper.submit(no_usage)
    assert shipper.flush(2)
    assert fake.posts == [] and shipper.stats().skipped == 1


# --- flush, close, no URL ---------------------------------------------------------------


def test_flush(fake: FakeCachewatch, make_shipper: ShipperFactory) -> None:
    shipper = make_shipper(fake.url, flush_interval_s=60.0)
    assert shipper.flush(1)  # nothing queued
    shipper.submit(call("a"))
    started = time.monotonic()
    assert shipper.flush(2)  # posts the partial batch at once, not in a minute
    assert time.monotonic() - started < 1.0
    assert list(fake.store) == ["a"]


def test_flush_times_out(down: FakeCachewatch, make_shipper: ShipperFactory) -> None:
    shipper = make_shipper(down.url)
    shipper.submit(call("a"))
    started = time.monotonic()
    assert not shipper.flush(0.2)
    assert 0.19 <= time.monotonic() - started < 0.6


def test_flush_timeout_is_one_bound_when_the_queue_is_full(
    down: FakeCachewatch, make_shipper: ShipperFactory
) -> None:
    shipper = make_shipper(down.url, max_queue=2, batch_size=1)
    stuck(shipper, call("first"))
    shipper.submit(call("a"))
    shipper.submit(call("b"))
    started = time.monotonic()
    assert not shipper.flush(0.3)
    assert time.monotonic() - started < 0.6


def test_flush_of_a_slow_cachewatch_times_out(
    fake: FakeCachewatch, make_shipper: ShipperFactory
) -> None:
    fake.slow_s = 1.0
    fake.set_mode("slow")
    shipper = make_shipper(fake.url)
    shipper.submit(call("a"))
    assert not shipper.flush(0.2)
    assert shipper.flush(3)
    assert shipper.stats().sent == 1


def test_close_is_bounded_with_cachewatch_down(
    down: FakeCachewatch, make_shipper: ShipperFactory
) -> None:
    shipper = make_shipper(down.url, batch_size=4)
    for c in calls(10):
        shipper.submit(c)
    started = time.monotonic()
    shipper.close(0.3)
    assert 0.29 <= time.monotonic() - started < 0.6
    stats = shipper.stats()
    assert (stats.dropped, stats.sent) == (10, 0)
    started = time.monotonic()
    shipper.close(5)  # closed already: at once
    assert time.monotonic() - started < 0.1


def test_close_is_bounded_with_cachewatch_hanging(
    fake: FakeCachewatch, make_shipper: ShipperFactory
) -> None:
    """cachewatch accepts the connection and never answers (within timeout_s): close
    still returns on time, with what did not leave counted as dropped."""
    fake.slow_s = 3.0
    fake.set_mode("slow")
    shipper = make_shipper(fake.url, timeout_s=5.0, batch_size=2, max_queue=4)
    for c in calls(9):
        shipper.submit(c)
    wait_until(lambda: len(fake.posts) == 1)
    started = time.monotonic()
    shipper.close(0.3)
    assert time.monotonic() - started < 0.6
    stats = shipper.stats()
    # Refused by the full queue, or queued and still unsent: all dropped, none lost.
    assert stats.dropped == 9 and stats.sent == 0 and 2 <= stats.queued <= 6
    assert shipper.submit(call("after")) is False and shipper.stats().dropped == 10


def test_close_delivers_what_it_can(fake: FakeCachewatch, make_shipper: ShipperFactory) -> None:
    shipper = make_shipper(fake.url, flush_interval_s=60.0)
    for c in calls(5):
        shipper.submit(c)
    shipper.close(2)
    assert len(fake.store) == 5 and shipper.stats().dropped == 0
    assert not shipper._thread.is_alive()
    assert shipper.flush(0.1)  # nothing left to wait for
    assert not shipper.submit(call("late"))  # closed: dropped, counted
    assert shipper.stats().dropped == 1 and len(fake.store) == 5


def test_no_url_counts_dropped_and_sends_nothing(
    make_shipper: ShipperFactory, caplog: pytest.LogCaptureFixture
) -> None:
    requests: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(200, json={"accepted": 1})

    shipper = make_shipper(None, transport=httpx.MockTransport(handler))
    assert shipper.settings.usage_url is None
    with caplog.at_level(logging.WARNING, "cachewatch_client"):
        assert [shipper.submit(c) for c in calls(3)] == [False] * 3
    assert shipper.flush(1)
    time.sleep(0.1)
    assert requests == []
    assert shipper.stats() == cachewatch_client.ShipperStats(dropped=3)
    assert len([r for r in caplog.records if "CACHEWATCH_URL" in r.getMessage()]) == 1
    shipper.close(1)


def test_transport_is_used(make_shipper: ShipperFactory) -> None:
    bodies: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(gzip.decompress(request.content))
        return httpx.Response(200, json={"accepted": 2, "duplicates": 0, "rejected": 0})

    shipper = make_shipper("http://cachewatch.invalid", transport=httpx.MockTransport(handler))
    for c in calls(2):
        shipper.submit(c)
    assert shipper.flush(2)
    assert len(bodies) == 1 and shipper.stats().sent == 2


def test_rejected_counts_come_from_the_answer(make_shipper: ShipperFactory) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        counts = {"accepted": 1, "duplicates": 1, "rejected": 1, "errors": []}
        return httpx.Response(200, json=counts)

    shipper = make_shipper("http://cachewatch.invalid", transport=httpx.MockTransport(handler))
    for c in calls(3):
        shipper.submit(c)
    assert shipper.flush(2)
    stats = shipper.stats()
    assert (stats.sent, stats.duplicates, stats.rejected) == (1, 1, 1)


# --- fork -----------------------------------------------------------------------------


def in_child(work: Callable[[], dict[str, Any]], timeout: float = 10.0) -> dict[str, Any] | None:
    """`work()` in a forked child; its JSON result, or None when the child did not
    answer within `timeout` (then it is killed)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        code = 1
        try:
            os.close(read)
            os.write(write, json.dumps(work()).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    try:
        ready, _, _ = select.select([read], [], [], timeout)
        if not ready:
            os.kill(pid, 9)
            return None
        data = b""
        while chunk := os.read(read, 65536):
            data += chunk
        return json.loads(data) if data else None
    finally:
        os.close(read)
        os.waitpid(pid, 0)


needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork here")


@needs_fork
def test_a_forked_child_ships(fake: FakeCachewatch, make_shipper: ShipperFactory) -> None:
    shipper = make_shipper(fake.url)
    shipper.submit(call("parent"))
    assert shipper.flush(2)

    def child() -> dict[str, Any]:
        queued = shipper.submit(call("child"))
        return {"queued": queued, "flushed": shipper.flush(5), "pid": os.getpid()}

    result = in_child(child)
    assert result is not None
    assert result["queued"] and result["flushed"] and result["pid"] != os.getpid()
    assert set(fake.store) == {"parent", "child"}
    shipper.submit(call("parent-again"))  # the parent's thread is unharmed
    assert shipper.flush(2)
    assert set(fake.store) == {"parent", "child", "parent-again"}


@needs_fork
def test_a_child_forked_while_the_shipper_held_its_lock(
    fake: FakeCachewatch, make_shipper: ShipperFactory
) -> None:
    """A fork can happen while the shipper's thread holds its lock (it counts after
    every batch): the child's submit must not wait on a lock no thread will free."""
    shipper = make_shipper(fake.url)
    shipper.submit(call("parent"))
    assert shipper.flush(2)

    def child() -> dict[str, Any]:
        return {"queued": shipper.submit(call("child")), "flushed": shipper.flush(5)}

    with shipper._lock:
        result = in_child(child, timeout=5.0)
    assert result == {"queued": True, "flushed": True}
    assert "child" in fake.store


@needs_fork
def test_multiprocessing_fork_child_ships(
    fake: FakeCachewatch, make_shipper: ShipperFactory
) -> None:
    shipper = make_shipper(fake.url)
    shipper.submit(call("parent"))
    context = multiprocessing.get_context("fork")
    process = context.Process(target=_child_submits, args=(shipper,))
    process.start()
    process.join(10)
    assert process.exitcode == 0
    assert shipper.flush(2)
    assert {"parent", "mp-child"} <= set(fake.store)


def _child_submits(shipper: Shipper) -> None:
    assert shipper.submit(call("mp-child"))
    assert shipper.flush(5)


# --- a real cachewatch ----------------------------------------------------------------


def test_records_arrive_in_a_real_cachewatch(live_server: LiveServer) -> None:
    engine = create_engine(live_server.database_url)
    try:
        with Session(engine) as session:
            token = create_token(session, Scope("admin"), "client-test")
            session.commit()
        sent: list[dict[str, Any]] = []
        settings = dataclasses.replace(
            settings_for(live_server.url, batch_size=10, timeout_s=10.0), token=token
        )
        shipper = Shipper(settings, on_record=sent.append)
        usages: list[dict[str, Any]] = [
            USAGE,
            {
                "input_tokens": 10,
                "cache_read_input_tokens": 200,
                "cache_creation_input_tokens": 30,
                "output_tokens": 7,
            },
            {"input_tokens": 50, "input_tokens_details": {"cached_tokens": 32}, "output_tokens": 3},
        ]
        expected: dict[str, tuple[int, int, int]] = {
            "0": (120, 64, 0),
            "1": (240, 200, 30),
            "2": (50, 32, 0),
        }
        ids = [f"live-{i}" for i in range(25)]
        for i, rid in enumerate(ids):
            assert shipper.submit(
                call(
                    rid,
                    usage=usages[i % 3],
                    request={**message_request(rid), "prompt_cache_key": f"conv-{i % 4}"},
                    labels=Labels(tenant="acme"),
                    first_token=time.time() + 0.1,
                )
            )
        assert shipper.flush(15)
        assert shipper.stats() == cachewatch_client.ShipperStats(queued=25, sent=25)

        with Session(engine) as session:
            rows = session.scalars(sql_select(UsageRecord)).all()
        stored = {row.request_id: row for row in rows}
        assert sorted(stored) == sorted(ids)
        by_id = {r["request_id"]: r for r in sent}
        for i, rid in enumerate(ids):
            row, record = stored[rid], by_id[rid]
            tokens = (row.prompt_tokens, row.cached_tokens, row.cache_write_tokens)
            assert tokens == expected[str(i % 3)]
            assert (row.service, row.model, row.tenant) == ("s", "m", "acme")
            assert row.session_id == row.cache_key == f"conv-{i % 4}"
            assert row.block_size == 16 and row.prefix_hash == record["prefix_hash"]
            assert row.prefix_tokens == record["prefix_tokens"]
            assert [s["hash"] for s in row.segments or []] == [
                s["hash"] for s in record["segments"]
            ]
            assert abs(row.ts_us - record["ts"] * 1_000_000) <= 1
            assert row.ttft_ms == pytest.approx(record["ttft_ms"])

        # The same calls again: the service counts them duplicates, stores nothing.
        for i, rid in enumerate(ids):
            shipper.submit(call(rid, usage=usages[i % 3]))
        assert shipper.flush(15)
        assert shipper.stats().duplicates == 25
        with Session(engine) as session:
            assert len(session.scalars(sql_select(UsageRecord)).all()) == 25
        answer = httpx.get(
            f"{live_server.url}/v1/rejected",
            headers={"Authorization": f"Bearer {token}"},
            timeout=10,
        )
        assert answer.status_code == 200 and answer.json() == []
        shipper.close(2)
    finally:
        engine.dispose()
