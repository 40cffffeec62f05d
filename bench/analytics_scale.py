"""How analytics time and memory grow with records (issue 8; not a test: prints a
table). For each size, in a fresh subprocess (so peak RSS never mixes):

* `pass`: the per-request values (`compute_request_metrics`, W = 1 h) and the minute
  and hour rollups built from them (as `rollup_writes.add_to_rollups` does, minus
  the database write), over N synthetic requests (bench/_synthetic.py: 16 blocks,
  24 h, 8 replicas, 100,000 sessions) held in memory;
* with `--db-sizes`, `catch_up`: the real first analytics pass against a fresh
  SQLite database holding those N records (read, compute, write rollups); with
  `--segments` also `catch_up+s`, the same records each carrying three segments
  (tools, system, a message), which the segment rollups read; with `--groups` also
  `catch_up+g`, the same records each carrying a `scenario` (10), a `tenant` (5,000)
  and a `deploy` (2 tags side by side), which the group rollups read (issue 19).

A worker whose RSS passes --max-rss-gib is killed and reported as such.

    .venv/bin/python bench/analytics_scale.py [--sizes 100000,1000000,5000000]
        [--db-sizes 100000,1000000] [--segments] [--groups] [--max-rss-gib 10]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

WINDOW_S = 3600.0
GiB = 2**30


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def synthetic(n: int) -> Any:
    """bench/_synthetic.py's requests, `session_id` as text (NumPy hands it over as
    Python objects)."""
    import polars as pl

    from bench._synthetic import requests

    frame = requests(n)
    if frame["session_id"].dtype == pl.Object:
        ids = pl.Series("session_id", frame["session_id"].to_list(), dtype=pl.Utf8)
        frame = frame.with_columns(ids)
    return frame


def worker_pass(n: int) -> dict[str, Any]:

    from service.analytics import compute_request_metrics
    from service.rollups import aggregate

    frame = synthetic(n)
    base = _peak_mib()
    started = time.perf_counter()
    results, _ = compute_request_metrics(frame, WINDOW_S)
    computed = time.perf_counter()
    joined = aggregate.join_results(frame, results)
    rows = 0
    for grain in (60, 3600):
        rollups = aggregate.finish(
            aggregate.rollup_sums(joined, grain), aggregate.ttft_counts(joined, grain)
        )
        rows += rollups.height + aggregate.prefix_sums(joined, grain).height
    done = time.perf_counter()
    return {
        "compute_s": computed - started,
        "rollups_s": done - computed,
        "total_s": done - started,
        "base_mib": base,
        "peak_mib": _peak_mib(),
        "rollup_rows": rows,
    }


#: What `--segments` gives every record: the static start (tools, system) and its
#: first message, as `cachewatch_client.fingerprint` would send them (issue 18's segment rollups).
SEGMENTS = [
    {"name": "tools", "hash": "tools-v1", "tokens": 1200, "norm_hash": "n-tools"},
    {"name": "system", "hash": "system-v1", "tokens": 800, "norm_hash": "n-system"},
]


def worker_catch_up(n: int, db: str, variant: str = "") -> dict[str, Any]:
    from service import migrate, repository
    from service.db import make_engine, make_sessionmaker
    from service.services import analytics_pass
    from service.settings import Settings

    settings = Settings(database_url=f"sqlite:///{db}", run_jobs=False, reuse_window_s=WINDOW_S)
    engine = make_engine(settings)
    migrate.upgrade(engine)
    frame = synthetic(n).drop("id")
    # What a record that sends only the synthetic fields is stored with.
    empty = {c: None for c in repository.USAGE_COLUMNS} | {"cache_write_tokens": 0}
    loaded = time.perf_counter()
    for start in range(0, n, 100_000):
        chunk = frame.slice(start, 100_000).to_dicts()
        rows = [
            {**empty, **r, "request_id": f"r{start + i}", "received_us": r["ts_us"]}
            for i, r in enumerate(chunk)
        ]
        if variant == "segments":
            for i, row in enumerate(rows):
                message = {"name": "message[0]", "hash": f"m{start + i}", "tokens": 40}
                row["segments"] = [*SEGMENTS, message]
        if variant == "groups":
            for i, row in enumerate(rows):
                k = start + i
                row |= {"scenario": f"sc{k % 10}", "tenant": f"t{k * 7 % 5000}"}
                row["deploy"] = "v2" if k % 10 == 0 else "v1"
        with engine.begin() as conn:
            conn.execute(repository.USAGE_TABLE.insert(), rows)
    del frame
    load_s = time.perf_counter() - loaded
    base = _peak_mib()
    started = time.perf_counter()
    with make_sessionmaker(engine).begin() as session:
        report = analytics_pass.catch_up(session, settings)
    elapsed = time.perf_counter() - started
    engine.dispose()
    assert report.records == n
    return {"total_s": elapsed, "insert_s": load_s, "base_mib": base, "peak_mib": _peak_mib()}


def run_worker(args: list[str], max_rss: float) -> dict[str, Any]:
    """The worker's JSON, or {"killed": peak} when it outgrew `max_rss` bytes."""
    process = subprocess.Popen(
        [sys.executable, __file__, "--worker", *args], stdout=subprocess.PIPE, cwd=ROOT
    )
    watched, peak = psutil.Process(process.pid), 0
    while process.poll() is None:
        try:
            peak = max(peak, watched.memory_info().rss)
        except psutil.NoSuchProcess:
            break
        if peak > max_rss:
            process.kill()
            process.wait()
            return {"killed_at_mib": peak / 2**20}
        time.sleep(0.2)
    out = process.stdout.read() if process.stdout else b""
    if process.returncode != 0:
        raise RuntimeError(f"worker {args} failed with {process.returncode}")
    return dict(json.loads(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100000,1000000,5000000")
    parser.add_argument("--db-sizes", default="", help="also a real catch_up on SQLite")
    parser.add_argument("--max-rss-gib", type=float, default=10.0)
    parser.add_argument(
        "--segments",
        action="store_true",
        help="each catch_up also with segments on every record (the segment rollups' cost)",
    )
    parser.add_argument(
        "--groups",
        action="store_true",
        help="each catch_up also with scenario, tenant and deploy on every record",
    )
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        kind, n = args.worker[0], int(args.worker[1])
        if kind == "pass":
            out = worker_pass(n)
        else:
            out = worker_catch_up(n, args.worker[2], *args.worker[3:4])
        print(json.dumps(out))
        return

    max_rss = args.max_rss_gib * GiB
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start; "
        "16 blocks/request, W = 1 h, one fresh process per row"
    )
    print(f"{'measure':<10} {'records':>10} {'wall s':>8} {'us/rec':>7} {'peak RSS':>10}  detail")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    for n in sizes:
        out = run_worker(["pass", str(n)], max_rss)
        if "killed_at_mib" in out:
            print(f"{'pass':<10} {n:>10,} killed: RSS passed {out['killed_at_mib']:,.0f} MiB")
            continue
        print(
            f"{'pass':<10} {n:>10,} {out['total_s']:>8.2f} {out['total_s'] / n * 1e6:>7.1f} "
            f"{out['peak_mib']:>7,.0f} MiB  per-request {out['compute_s']:.2f} s + rollups "
            f"{out['rollups_s']:.2f} s; input frame {out['base_mib']:,.0f} MiB"
        )
    db_sizes = [int(s) for s in args.db_sizes.split(",") if s]
    with tempfile.TemporaryDirectory(prefix="cachewatch-scale-") as tmp:
        for n in db_sizes:
            variants = [
                "",
                *(["segments"] if args.segments else []),
                *(["groups"] if args.groups else []),
            ]
            for variant in variants:
                db = str(Path(tmp) / f"scale-{n}{variant}.db")
                out = run_worker(["catch_up", str(n), db, *([variant] if variant else [])], max_rss)
                name = "catch_up" + {"": "", "segments": "+s", "groups": "+g"}[variant]
                if "killed_at_mib" in out:
                    print(f"{name:<10} {n:>10,} killed: RSS passed {out['killed_at_mib']:,.0f} MiB")
                    continue
                print(
                    f"{name:<10} {n:>10,} {out['total_s']:>8.2f} "
                    f"{out['total_s'] / n * 1e6:>7.1f} {out['peak_mib']:>7,.0f} MiB  "
                    f"SQLite read + compute + rollup write (filling it took "
                    f"{out['insert_s']:.0f} s)"
                    + {
                        "": "",
                        "segments": ", every record with 3 segments",
                        "groups": ", every record with a scenario, tenant and deploy",
                    }[variant]
                )
                os.unlink(db)


if __name__ == "__main__":
    main()
