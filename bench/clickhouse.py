"""Ingest and analytics-pass throughput: a ClickHouse deployment against the
PostgreSQL one, in the same run, on the same records (issue 21; not a test).

For each size N, two fresh worker processes (so peak RSS never mixes), one per
deployment, each on the same N synthetic records (bench/_synthetic.py: 16 blocks
of 512 tokens, 24 h, 8 replicas, 100,000 sessions):

* `postgresql`: records in PostgreSQL (`insert_usage_values`: the COPY the
  ingestion service runs), the relational pass (`analytics_pass.catch_up`);
* `clickhouse`: records in ClickHouse (the engine in-process, chdb; the same
  `insert_usage_values`, which the session routes to service.clickhouse.records),
  the ClickHouse pass (SQL there, rollups to the same PostgreSQL).

Records go in in time order. Ingest is timed over the insert calls alone (batches
of --batch rows, built before the clock starts); after every --pass-every records
(1,000,000) the analytics pass runs (`catch_up`), as the worker does on its
interval, so a pass after the first is a forward one over the new records,
looking back W; `pass` is their total, rollups written, and within it `values`:
the passes without their rollup writes (`add_to_rollups`, the same code on both),
i.e. reading the records and computing the per-request values, the part
ClickHouse takes over. Each prints records/s,
the worker's peak RSS (for chdb that includes the engine, in-process) and
ClickHouse's bytes on disk.

    .venv/bin/python bench/clickhouse.py [--sizes 1000000,10000000] [--batch 10000]
        [--pass-every 1000000] [--shards 4]
        [--postgres postgresql+psycopg://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _workers import drop_database, fresh_database  # the bench folder: the script's own

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _rows(frame: Any, received_us: int) -> list[tuple[Any, ...]]:
    """The synthetic records as `usage_row_values` tuples (USAGE_COLUMNS order)."""
    from service.usage_row import USAGE_COLUMNS

    n = frame.height
    given = {
        "request_id": [f"b{i}" for i in frame["id"].to_list()],
        "ts_us": frame["ts_us"].to_list(),
        "received_us": [received_us] * n,
        "cache_write_tokens": [0] * n,
        **{c: frame[c].to_list() for c in frame.columns if c not in ("id", "ts_us")},
    }
    none = [None] * n
    columns = [given.get(c, none) for c in USAGE_COLUMNS]
    return list(zip(*columns, strict=True))


def _timed(module: Any, name: str) -> list[float]:
    """Wrap module.name so that its time adds up in the returned cell."""
    spent = [0.0]
    inner = getattr(module, name)

    def timed(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - t0

    setattr(module, name, timed)
    return spent


def worker(
    backend: str, n: int, batch: int, pg_admin: str, shards: int, pass_every: int
) -> dict[str, Any]:
    from bench.analytics_scale import synthetic
    from service import migrate
    from service.clickhouse import clickhouse_for
    from service.db import make_engine, make_sessionmaker
    from service.repository import insert_usage_values
    from service.services import clickhouse_pass, rollup_writes
    from service.services.analytics_pass import catch_up
    from service.settings import Settings

    frame = synthetic(n)
    pg_url = fresh_database(pg_admin, Path(tempfile.gettempdir()), "clickhouse")
    chdb_dir = Path(tempfile.mkdtemp(prefix="cw-bench-chdb-"))
    out: dict[str, Any] = {"backend": backend, "records": n}
    try:
        settings = Settings(
            database_url=pg_url,
            run_jobs=False,
            clickhouse_url=f"chdb://{chdb_dir}?database=bench" if backend == "clickhouse" else None,
            clickhouse_visibility_lag_s=0.0,
            clickhouse_pass_shards=shards,
        )
        engine = make_engine(settings)
        migrate.upgrade(engine)
        ch = clickhouse_for(settings)
        factory = make_sessionmaker(engine, ch)
        rollups = _timed(rollup_writes, "add_to_rollups")
        clickhouse_pass.add_to_rollups = rollup_writes.add_to_rollups  # both passes
        received = time.time_ns() // 1000
        out["ingest_s"] = out["pass_s"] = 0.0
        out["passed"] = 0
        for start in range(0, n, batch):
            rows = _rows(frame.slice(start, batch), received)
            t0 = time.perf_counter()
            with factory.begin() as session:
                insert_usage_values(session, rows)
            out["ingest_s"] += time.perf_counter() - t0
            if (start + batch) % pass_every == 0 or start + batch >= n:
                t0 = time.perf_counter()
                with factory.begin() as session:
                    out["passed"] += catch_up(session, settings).records
                out["pass_s"] += time.perf_counter() - t0
        out["rollups_s"] = rollups[0]
        if ch is not None:
            disk = ch.query(
                "SELECT sum(bytes_on_disk) AS b FROM system.parts "
                "WHERE database = currentDatabase() AND active"
            )
            out["disk_mib"] = int(disk["b"][0]) / 2**20
        out["peak_mib"] = _peak_mib()
        engine.dispose()
    finally:
        drop_database(pg_admin, pg_url)
        shutil.rmtree(chdb_dir, ignore_errors=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--postgres", default=PG)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--pass-every", type=int, default=1_000_000)
    parser.add_argument("--worker", nargs=2, metavar=("BACKEND", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        backend, n = args.worker
        result = worker(backend, int(n), args.batch, args.postgres, args.shards, args.pass_every)
        print(json.dumps(result))
        return
    header = ("records", "deployment", "ingest rec/s", "pass rec/s", "values rec/s", "rollups s",
              "peak RSS MiB", "CH disk MiB")  # fmt: skip
    widths = (11, 11, 13, 11, 13, 10, 13, 12)
    print(" ".join(f"{h:>{w}}" for h, w in zip(header, widths, strict=True)))
    for n in [int(s) for s in args.sizes.split(",")]:
        results = {}
        for backend in ("postgresql", "clickhouse"):
            cmd = [sys.executable, __file__, "--worker", backend, str(n),
                   "--batch", str(args.batch), "--postgres", args.postgres,
                   "--shards", str(args.shards), "--pass-every", str(args.pass_every)]  # fmt: skip
            done = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
            if done.returncode != 0:
                print(f"{n:>11,} {backend:>11} failed: {done.stderr.strip()[-600:]}")
                continue
            r = json.loads(done.stdout.strip().splitlines()[-1])
            results[backend] = r
            values_s = r["pass_s"] - r["rollups_s"]
            print(
                f"{n:>11,} {backend:>11} {n / r['ingest_s']:>13,.0f} {n / r['pass_s']:>11,.0f} "
                f"{n / values_s:>13,.0f} {r['rollups_s']:>10,.1f} "
                f"{r['peak_mib']:>13,.0f} {r.get('disk_mib', 0):>12,.0f}",
                flush=True,
            )
        if len(results) == 2:
            pg, ch = results["postgresql"], results["clickhouse"]
            pg_values, ch_values = pg["pass_s"] - pg["rollups_s"], ch["pass_s"] - ch["rollups_s"]
            print(
                f"{'':>11} {'ratio':>11} {pg['ingest_s'] / ch['ingest_s']:>12.2f}x "
                f"{pg['pass_s'] / ch['pass_s']:>10.2f}x {pg_values / ch_values:>12.2f}x"
                "   (speed of ClickHouse over PostgreSQL, same run)",
                flush=True,
            )


if __name__ == "__main__":
    main()
