"""The client's cost to the application: per-call wall time of an instrumented
`openai` client against an uninstrumented one, with cachewatch healthy, down,
answering 503 or 429, slow, and with a queue too small to hold what it cannot send.

The application's calls are sync Chat Completions, non-streamed and streamed with
`include_usage`, to the fake providers (tests/client/fake_providers.py). The fake
cachewatch is tests/client/fake_cachewatch.py, in its modes (200 with counts, 503 +
Retry-After, 429, slow answers, down: nothing listening). Both run in a child
process (tests/client/test_faults.py's `Fakes`), so this one holds only what an
application's would: its calls and the shipper's thread. The provider forgets its
prompts after every call (untimed), or its prefix scan would grow with the calls.

In each mode a fresh shipper and instrumented client make `--calls` calls of each
kind, in rounds of `--round` taken in turn with the uninstrumented client's
(A/B/A/B: the machine's drift falls on both alike); the table gives each one's
median and p99 per call, the overhead (instrumented median - uninstrumented
median) and their ratio, the shipper's counts at the end of the mode, then once
cachewatch is healthy again: what arrived (each record once) and what was lost.
These machines are noisy: only the figures of one run are compared.

Last, the tap alone, in-process, no network: an `httpx.Client` on a
`MockTransport` answering prebuilt bodies, with and without the tap (its
`Tap.start`, the stream wrapper, `submit` into a queue no thread drains), and
`Shipper.submit` alone.

    .venv/bin/python bench/client.py [--calls 2000] [--round 100] [--quick]
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import httpx
import openai

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

from cachewatch_client import Labels, Settings, Shipper, ShipperStats, instrument  # noqa: E402
from cachewatch_client.calls import Call, to_record  # noqa: E402
from tests.client.fake_providers import (  # noqa: E402
    DEFAULT_REPLY,
    Tokens,
    chat_completion,
    chat_stream,
    usage_for,
)
from tests.client.test_faults import (  # noqa: E402
    MODEL_OPENAI,
    OVERHEAD_BOUND_S,
    SYSTEM,
    Fakes,
    openai_call,
    timed_rounds,
)

KINDS = {"chat": False, "chat stream": True}
#: The modes: the fake cachewatch's mode while the calls are made; "overflow" is
#: "down" with a queue of `--overflow-queue` calls.
MODES = ("healthy", "down", "503", "429", "slow", "overflow")
FAKE_MODE = {"healthy": "ok", "overflow": "down"}


# --- one mode ----------------------------------------------------------------------------


@dataclass
class Measured:
    median_us: float
    p99_us: float

    @classmethod
    def of(cls, times: list[float]) -> Measured:
        return cls(statistics.median(times) * 1e6, statistics.quantiles(times, n=100)[98] * 1e6)


@dataclass
class ModeResult:
    mode: str
    plain: dict[str, Measured]
    tapped: dict[str, Measured]
    during: ShipperStats
    after: ShipperStats
    calls: int
    stored: int
    posted_twice: int
    recovery_s: float
    recovered: bool

    def overhead_us(self, kind: str) -> float:
        return self.tapped[kind].median_us - self.plain[kind].median_us


def delta(now: ShipperStats, before: ShipperStats) -> ShipperStats:
    return ShipperStats(
        **{f.name: getattr(now, f.name) - getattr(before, f.name) for f in fields(now)}
    )


def run_mode(mode: str, fakes: Fakes, plain: openai.OpenAI, args: argparse.Namespace) -> ModeResult:
    tuning: dict[str, Any] = {"retry_base_s": args.retry_base, "retry_max_s": args.retry_max}
    if mode == "overflow":
        tuning["max_queue"] = args.overflow_queue
    shipper = Shipper(
        Settings.resolve(url=fakes.cachewatch_url, token="bench", service="bench", **tuning)
    )
    tapped = instrument(
        openai.OpenAI(base_url=fakes.openai_base_url, api_key="x", max_retries=0),
        shipper=shipper,
    )
    for client in (plain, tapped):  # connections made, the shipper's thread running
        for stream in KINDS.values():
            openai_call(client, stream)
    shipper.flush(10)
    fakes.reset()
    fakes.ask("forget")
    before = shipper.stats()

    ids: list[str] = []

    def between(name: str) -> None:
        served = fakes.reset()  # the provider's ids of the call just made
        if name.startswith("tapped"):
            ids.extend(served)

    calls: dict[str, Callable[[], Any]] = {}
    for kind, stream in KINDS.items():
        calls[f"plain {kind}"] = functools.partial(openai_call, plain, stream)
        calls[f"tapped {kind}"] = functools.partial(openai_call, tapped, stream)
    fakes.set_mode(FAKE_MODE.get(mode, mode))
    times = timed_rounds(calls, args.calls, args.round, between=between)
    during = delta(shipper.stats(), before)

    fakes.set_mode("ok")
    started = time.monotonic()
    recovered = shipper.flush(args.recovery_timeout)
    recovery_s = time.monotonic() - started
    after = delta(shipper.stats(), before)
    shipper.close(1.0)
    posted = fakes.posted()
    assert set(posted) <= set(ids), "records of calls this mode did not make"
    return ModeResult(
        mode=mode,
        plain={kind: Measured.of(times[f"plain {kind}"]) for kind in KINDS},
        tapped={kind: Measured.of(times[f"tapped {kind}"]) for kind in KINDS},
        during=during,
        after=after,
        calls=len(ids),
        stored=len(posted),
        posted_twice=sum(1 for n in posted.values() if n > 1),
        recovery_s=recovery_s,
        recovered=recovered,
    )


def print_header() -> None:
    print(
        f"{'mode':<9} {'call':<12} {'plain us/call':>16} {'instrumented us/call':>21} "
        f"{'overhead':>9} {'ratio':>6}"
    )
    print(f"{'':<9} {'':<12} {'median':>8}{'p99':>8} {'median':>10}{'p99':>11} {'us/call':>9}")


def print_mode(result: ModeResult) -> None:
    for kind in KINDS:
        plain, tapped = result.plain[kind], result.tapped[kind]
        print(
            f"{result.mode:<9} {kind:<12} {plain.median_us:>8,.0f}{plain.p99_us:>8,.0f} "
            f"{tapped.median_us:>10,.0f}{tapped.p99_us:>11,.0f} "
            f"{result.overhead_us(kind):>+9,.0f} {tapped.median_us / plain.median_us:>6.3f}"
        )
    d, a = result.during, result.after
    lost = result.calls - result.stored - a.dropped
    print(
        f"{'':<9} shipper in the mode: queued {d.queued:,} sent {d.sent:,} "
        f"dropped {d.dropped:,} retries {d.retries:,}; healthy again "
        + (f"{result.recovery_s:.1f} s later" if result.recovered else "flush TIMED OUT")
        + f": sent {a.sent:,} (+{a.duplicates:,} duplicates), stored {result.stored:,} of "
        f"{result.calls:,} calls ({result.posted_twice} posted twice), dropped {a.dropped:,}, "
        f"lost {lost:,}"
    )


# --- the tap alone -----------------------------------------------------------------------


def chat_request(stream: bool) -> bytes:
    body: dict[str, Any] = {
        "model": MODEL_OPENAI,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "Where is my order?"},
        ],
    }
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return json.dumps(body).encode()


def answers() -> tuple[bytes, list[bytes]]:
    """A whole Chat Completion and the chunks of its stream (with its usage)."""
    usage = usage_for("chat", Tokens(prompt=900, cached=896, written=0, completion=12))
    whole = json.dumps(chat_completion("chatcmpl-1", MODEL_OPENAI, DEFAULT_REPLY, usage))
    body = json.loads(chat_request(True))
    return whole.encode(), chat_stream("chatcmpl-1", MODEL_OPENAI, DEFAULT_REPLY, usage, body)


def mock_provider() -> httpx.MockTransport:
    """Prebuilt answers, each as a real transport's stream (`content=bytes` would
    be read at once, before any transport wrapper sees it)."""
    whole, chunks = answers()

    def answer(request: httpx.Request) -> httpx.Response:
        if b'"stream": true' in request.content:
            headers = {"content-type": "text/event-stream"}
            return httpx.Response(200, headers=headers, content=iter(chunks))
        headers = {"content-type": "application/json"}
        return httpx.Response(200, headers=headers, content=iter([whole]))

    return httpx.MockTransport(answer)


def stuck_shipper(capacity: int) -> Shipper:
    """A shipper whose thread sits in its retry loop from the first call on (its
    cachewatch answers 503, Retry-After an hour): every later call stays queued."""
    busy = httpx.MockTransport(lambda _: httpx.Response(503, headers={"Retry-After": "3600"}))
    settings = Settings.resolve(
        url="http://cachewatch.invalid",
        token="bench",
        service="bench",
        batch_size=1,
        retry_max_s=3600.0,
        max_queue=capacity,
        max_queue_bytes=2**40,
        exit_timeout_s=0.1,
    )
    shipper = Shipper(settings, transport=busy)
    call = Call(chat_request(False), time.time(), Labels(), "bench", 16, api="chat", body=b"{}")
    shipper.submit(call)
    deadline = time.monotonic() + 10
    while shipper.stats().retries < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    return shipper


def tap_alone(calls: int, round_size: int) -> tuple[dict[str, float], float, float]:
    """The tap's cost per call (median, us) for each kind, `submit`'s alone, and
    the shipper thread's work on a call (`to_record`: parse, fingerprint)."""
    shipper = stuck_shipper(4 * calls + round_size * 4 + 100)
    plain = httpx.Client(transport=mock_provider())
    tapped = instrument(httpx.Client(transport=mock_provider()), shipper=shipper)
    url = "http://provider.invalid/v1/chat/completions"
    requests = {stream: chat_request(stream) for stream in KINDS.values()}

    def one(client: httpx.Client, stream: bool) -> Callable[[], Any]:
        def call() -> None:
            with client.stream("POST", url, content=requests[stream]) as response:
                for _ in response.iter_bytes():
                    pass

        return call

    table: dict[str, Callable[[], Any]] = {}
    for kind, stream in KINDS.items():
        table[f"plain {kind}"] = one(plain, stream)
        table[f"tapped {kind}"] = one(tapped, stream)
    for warm_up in table.values():
        warm_up()
    times = timed_rounds(table, calls, round_size)
    costs = {
        kind: (
            statistics.median(times[f"tapped {kind}"]) - statistics.median(times[f"plain {kind}"])
        )
        * 1e6
        for kind in KINDS
    }
    queued = shipper.stats().queued
    assert queued >= 2 * calls, f"the tapped calls were not all queued ({queued:,})"

    whole, _ = answers()
    prebuilt = [
        Call(requests[False], time.time(), Labels(), "bench", 16, api="chat", body=whole)
        for _ in range(calls)
    ]
    started = time.perf_counter()
    for prepared in prebuilt:
        shipper.submit(prepared)
    submit_us = (time.perf_counter() - started) / calls * 1e6
    shipper.close(0.1)
    sample = prebuilt[: min(calls, 2_000)]
    started = time.perf_counter()
    for prepared in sample:
        to_record(prepared)
    record_us = (time.perf_counter() - started) / len(sample) * 1e6
    return costs, submit_us, record_us


# --- main --------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=2_000, help="calls of each client and kind")
    parser.add_argument("--round", type=int, default=100, help="calls in a row of one client")
    parser.add_argument("--modes", default=",".join(MODES), help=f"of {', '.join(MODES)}")
    parser.add_argument("--slow", type=float, default=2.0, help="seconds a slow answer takes")
    parser.add_argument("--retry-after", default="1", help="the 503 answers' Retry-After")
    parser.add_argument("--retry-base", type=float, default=0.05, help="the shipper's retry_base_s")
    parser.add_argument("--retry-max", type=float, default=1.0, help="the shipper's retry_max_s")
    parser.add_argument("--overflow-queue", type=int, default=100, help="max_queue in overflow")
    parser.add_argument("--recovery-timeout", type=float, default=60.0)
    parser.add_argument("--tap-calls", type=int, default=20_000, help="calls of the tap alone")
    parser.add_argument("--quick", action="store_true", help="a short run: 200 calls, rounds of 20")
    args = parser.parse_args()
    # The client's one warning a fault ("cachewatch unreachable, retrying") would cut
    # into the table: the shipper's counts below say the same.
    logging.getLogger("cachewatch_client").setLevel(logging.ERROR)
    if args.quick:
        args.calls, args.round, args.tap_calls = 200, 20, 2_000
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown modes {sorted(unknown)}")

    print(
        f"{args.calls:,} calls per client and kind, rounds of {args.round} in turn (A/B/A/B); "
        f"openai {openai.__version__}, loopback, fakes in a child process; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start"
    )
    print(
        f"shipper: retries {args.retry_base}-{args.retry_max} s; cachewatch's 503s say "
        f"Retry-After {args.retry_after} s, its slow answers take {args.slow} s; overflow: "
        f"max_queue {args.overflow_queue}, cachewatch down"
    )
    fakes = Fakes(args.slow, args.retry_after)
    results: list[ModeResult] = []
    try:
        plain = openai.OpenAI(base_url=fakes.openai_base_url, api_key="x", max_retries=0)
        print_header()
        for mode in modes:
            results.append(run_mode(mode, fakes, plain, args))
            print_mode(results[-1])
    finally:
        fakes.close()

    costs, submit_us, record_us = tap_alone(args.tap_calls, args.round)
    print(
        f"tap alone ({args.tap_calls:,} calls of each kind, httpx MockTransport, in-process, "
        "tap against none): "
        + ", ".join(f"{kind} {us:+.1f} us/call" for kind, us in costs.items())
        + f"; of which Shipper.submit {submit_us:.1f} us/call"
    )
    print(
        f"off the application's thread: to_record (parse + fingerprint) {record_us:.0f} us/call "
        "on the shipper's, in the same process (its GIL)"
    )
    lost = sum(r.calls - r.stored - r.after.dropped for r in results)
    worst = max(
        ((r.overhead_us(kind), r, kind) for r in results for kind in KINDS),
        key=lambda found: found[0],
        default=None,
    )
    if worst is None:
        return
    overhead, result, kind = worst
    bound_us = OVERHEAD_BOUND_S * 1e6
    print(
        f"worst median overhead {overhead:+,.0f} us per call ({result.mode}, {kind}; ratio "
        f"{result.tapped[kind].median_us / result.plain[kind].median_us:.3f}); records lost "
        f"{lost:,}; tests/client/test_faults.py's bound {bound_us:,.0f} us: "
        + ("within" if overhead < bound_us else "EXCEEDED")
    )


if __name__ == "__main__":
    main()
