"""GET /v1/findings speed (issue 18; not a test: prints numbers).

The dashboard bench's data (bench/dashboard.py `build`: D days of R requests a day
in the rollups, 4 services x 2 models x 8 replicas, a KV budget `config` event, the
newest 20,000 requests of each model as records for the capacity replay, and the
segment rollups: svc-0's system prompt carries a timestamp, svc-1's is rendered
two ways).

Then, against a real `cachewatch serve` on that database (public read), over the
whole range: GET /v1/findings with the eviction findings' capacity curves replayed
(each `to` a microsecond apart, so each answer is a new replay key), then the same
with the replays kept (the rest is computed every time), and in the same run GET
/v1/metrics with 1-day buckets over the same range as the baseline. Best and
median of N runs; the ratios are against the baseline.

Goal: GET /v1/findings over 30 days of 1,000,000 requests a day <= 500 ms.

    .venv/bin/python bench/findings.py [--days 30] [--per-day 1000000] [--repeat 7]
        [--keep DIR]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import dashboard as dashboard_bench  # noqa: E402
import httpx  # noqa: E402


def timed(client: httpx.Client, path: str, repeat: int) -> tuple[list[float], httpx.Response]:
    times, answer = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        answer = client.get(path)
        times.append((time.perf_counter() - started) * 1000)
        answer.raise_for_status()
    assert answer is not None
    return times, answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--per-day", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--keep", help="folder for the SQLite database; reused when present")
    args = parser.parse_args()
    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="cw-findings-"))
    folder.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{folder / 'findings.db'}"
    try:
        if (folder / "findings.db").exists():
            print("reusing the database built before")
        else:
            started = time.perf_counter()
            built = dashboard_bench.build(url, args.days, args.per_day)
            print(
                f"built {args.days} days x {args.per_day:,} requests in "
                f"{time.perf_counter() - started:.0f} s "
                f"({built['rows']['segment_rollups']:,} segment rollup rows)"
            )
        with (
            dashboard_bench.server(url, folder / "server.log") as base,
            httpx.Client(base_url=base, timeout=60) as client,
        ):
            # Each `to` a microsecond apart: the same hours, but a new replay key, so
            # every one of these answers replays the capacity curves.
            end_us = dashboard_bench.START_US + args.days * dashboard_bench.DAY_US
            first_ms = [
                timed(client, f"/v1/findings?to={(end_us + k) / 1e6:.6f}", 1)[0][0]
                for k in range(1, args.repeat + 1)
            ]
            findings_ms, answer = timed(client, "/v1/findings", args.repeat + 1)
            findings_ms = findings_ms[1:]  # after the first, the replays are kept
            metrics_ms, _ = timed(client, "/v1/metrics?bucket=1d", args.repeat)
            found = answer.json()
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    kinds = ", ".join(sorted({f"{f['kind']} {f['service']}/{f['model']}" for f in found}))
    print(f"findings: {len(found)} ({kinds})")
    rows = (
        ("GET /v1/findings, replaying", first_ms, "computed, capacity curves replayed"),
        ("GET /v1/findings", findings_ms, "computed, the replays kept"),
        ("GET /v1/metrics 1d", metrics_ms, "computed every time"),
    )
    for name, times, how in rows:
        print(
            f"{name:28} best {min(times):7.1f} ms   median {statistics.median(times):7.1f} ms"
            f"   (n={len(times)}, {how})"
        )
    print(
        f"ratio to GET /v1/metrics (best): replaying {min(first_ms) / min(metrics_ms):.1f}, "
        f"kept {min(findings_ms) / min(metrics_ms):.1f}; goal <= 500 ms (best): "
        f"replaying {_verdict(first_ms)}, kept {_verdict(findings_ms)}"
    )


def _verdict(times: list[float]) -> str:
    return "meets" if min(times) <= 500 else "MISSES"


if __name__ == "__main__":
    main()
