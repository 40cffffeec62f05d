"""Peak memory of request bodies: how much a `cachewatch serve` process's peak RSS
(VmHWM) grows, each case on a fresh server and SQLite file after a warm-up.

- `one`, `four`, `bombs`: the three cases of the memory issue, under the default
  budget: one gzip body inflating to 64 MiB of invalid records (each goes through
  pydantic and is kept verbatim in the rejected store), four such bodies in
  parallel (503s retried until they get through), 16 gzip bombs of about 65 KB in
  parallel. tests/e2e/test_body_memory.py bounds the same three (tests/e2e/bodies.py
  builds the bodies of both).
- `shapes`: one body of each shape under a budget that refuses nothing, and its
  peak growth per decoded byte (the inflated size for gzip): the measures behind
  `service.ingest.inflight.DECODE_FACTOR` and its estimate of dense JSON, which is
  printed beside them.

    .venv/bin/python bench/body_memory.py [--case one|four|bombs|shapes] [--records-mib 64]
                                          [--shape-mib 8]
"""

import argparse
import gzip
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import orjson

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

from service.ingest.inflight import DECODE_FACTOR, json_values_cost  # noqa: E402
from tests.conftest import LiveServer, make_live_server  # noqa: E402
from tests.e2e.bodies import (  # noqa: E402
    Memory,
    MiB,
    gzip_bomb,
    invalid_records,
    post_until_through,
    record_line,
)


@contextmanager
def server(**settings: str) -> Iterator[tuple[LiveServer, str, Memory]]:
    """A fresh server (background jobs off), its ingest token, its memory after a
    warm-up of both decoding paths."""
    with tempfile.TemporaryDirectory(prefix="cachewatch-memory-") as tmp:
        live = make_live_server(
            Path(tmp), f"sqlite:///{tmp}/memory.db", run_jobs="false", **settings
        )
        live.start()
        try:
            assert live.process is not None
            token = live.token("ingest")
            warm, _ = invalid_records(256 * 1024)
            post_until_through(live.url, token, [gzip.compress(warm)])
            yield live, token, Memory(live.process.pid)
        finally:
            live.stop()


def measure_case(case: str, records_mib: int) -> None:
    if case == "bombs":
        bodies = [gzip_bomb(65 * MiB)] * 16
    else:
        inflated, _ = invalid_records(records_mib * MiB)
        bodies = [gzip.compress(inflated, 6)] * (1 if case == "one" else 4)
    with server() as (live, token, memory):
        start = memory.reset()
        started = time.perf_counter()
        finals, busy = post_until_through(live.url, token, bodies)
        elapsed = time.perf_counter() - started
        growth = memory.peak() - start
    answers = dict(Counter(a.status_code for a in finals))
    print(
        f"{case:<5} {len(bodies):>2} x {len(bodies[0]) / MiB:.2f} MiB gzip: answers {answers}, "
        f"{len(busy)} x 503 retried; {elapsed:5.1f} s; peak RSS +{growth / MiB:,.0f} MiB"
    )


# --- shapes ------------------------------------------------------------------------


def ndjson(size: int, line: Callable[[int], bytes]) -> bytes:
    lines: list[bytes] = []
    total = 0
    while total < size:
        lines.append(line(len(lines)))
        total += len(lines[-1]) + 1
    return b"\n".join(lines)


def smallest(i: int) -> bytes:
    return b'{"request_id":"r%d","ts":1714564800,"service":"s","model":"m","prompt_tokens":1}' % i


def otlp_span(i: int) -> dict[str, object]:
    attributes = [
        {"key": "gen_ai.request.model", "value": {"stringValue": "m"}},
        {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "1200"}},
        {"key": "gen_ai.usage.cache_read.input_tokens", "value": {"intValue": "1024"}},
        {"key": "gen_ai.response.id", "value": {"stringValue": f"chatcmpl-{i}"}},
    ]
    start = 1_714_564_800_000_000_000 + i * 1_000_000
    return {"traceId": f"{i:032x}", "spanId": f"{i:016x}", "name": "chat",
            "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 10**9),
            "attributes": attributes}  # fmt: skip


def otlp_json(size: int) -> bytes:
    span_bytes = len(orjson.dumps(otlp_span(0))) + 1
    spans = [otlp_span(i) for i in range(size // span_bytes)]
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": "s"}}]}
    return orjson.dumps(
        {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": spans}]}]}
    )


def shapes(size: int) -> list[tuple[str, str, bytes, dict[str, str], int]]:
    """(name, path, body, headers, decoded size) of each shape."""
    array = b"[" + b",".join(smallest(i) for i in range(size // 80)) + b"]"
    dense = b"[" + b"[]," * (size // 3) + b"[]]"
    usage, traces = "/v1/usage", "/v1/otlp/v1/traces"
    bodies = [
        ("invalid records, NDJSON", usage, invalid_records(size)[0], {}),
        ("usual valid records, NDJSON", usage, ndjson(size, lambda i: record_line(i, "v")), {}),
        ("smallest valid records, NDJSON", usage, ndjson(size, smallest), {}),
        ("smallest valid records, gzip array", usage, array, {"Content-Encoding": "gzip"}),
        ("OTLP JSON GenAI spans", traces, otlp_json(size), {"Content-Type": "application/json"}),
        ("dense JSON [[],[],...]", usage, dense, {}),
    ]
    return [
        (name, path, gzip.compress(body) if "Content-Encoding" in headers else body, headers,
         len(body))
        for name, path, body, headers in bodies
    ]  # fmt: skip


def measure_shapes(size: int) -> None:
    print(
        f"{'shape':<36} {'decoded':>8} {'peak +':>8} {'per byte':>9} "
        f"{'charged per byte (decoding, estimate of dense JSON)':>52}"
    )
    for name, path, body, headers, decoded in shapes(size):
        with server(max_inflight_bytes=str(1 << 40)) as (live, token, memory):
            start = memory.reset()
            answer = httpx.post(
                live.url + path,
                content=body,
                headers={"Authorization": f"Bearer {token}", **headers},
                timeout=600,
            )
            growth = memory.peak() - start
        assert answer.status_code == 200, answer.text[:300]
        raw = gzip.decompress(body) if "Content-Encoding" in headers else body
        estimate = json_values_cost(raw) / decoded
        print(
            f"{name:<36} {decoded / MiB:>6.1f} M {growth / MiB:>6.0f} M {growth / decoded:>8.1f}x "
            f"{DECODE_FACTOR:>34}x, {estimate:>5.1f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    cases = ["one", "four", "bombs", "shapes"]
    parser.add_argument("--case", choices=cases, action="append")
    parser.add_argument("--records-mib", type=int, default=64, help="inflated size of a body")
    parser.add_argument("--shape-mib", type=int, default=8, help="decoded size of each shape")
    args = parser.parse_args()
    for case in args.case or cases:
        if case == "shapes":
            measure_shapes(args.shape_mib * MiB)
        else:
            measure_case(case, args.records_mib)


if __name__ == "__main__":
    main()
