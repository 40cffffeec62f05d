"""The three deployments side by side: SQLite, PostgreSQL and a ClickHouse server
(Debian's 18.16, started here on loopback, or --clickhouse URL), in one run, on the
same records (issue 33; not a test).

For each size N, one fresh worker process per deployment (so peak RSS never
mixes), each on the same N synthetic records (bench/_synthetic.py: 16 blocks of
512 tokens, 24 h, 8 replicas, 100,000 sessions):

* `sqlite`, `postgresql`: records in the relational database
  (`insert_usage_values`: what the ingestion service runs), the relational pass;
* `clickhouse`: records in ClickHouse (the same `insert_usage_values`, which the
  session routes to service.clickhouse.records), the ClickHouse pass (SQL there,
  rollups to PostgreSQL); `chdb` (with --chdb): the same with the engine in-process.

Records go in in time order. Ingest is timed over the insert calls alone (batches
of --batch rows, built before the clock starts); after every --pass-every records
the analytics pass runs (`catch_up`), as the worker does on its interval, so a
pass after the first is a forward one over the new records, looking back W;
`pass` is their total, rollups written, and within it `values`: the passes
without their rollup writes (`add_to_rollups`, the same code on all), i.e. reading
the records and computing the per-request values, the part ClickHouse takes over.
The ratio lines divide PostgreSQL's seconds by ClickHouse's (above 1: ClickHouse
faster). Then, with --http N, HTTP ingest: N records posted to one `cachewatch
serve` (bench/ingest.py) on PostgreSQL alone and with ClickHouse.

    .venv/bin/python bench/clickhouse.py [--sizes 1000000,10000000] [--batch 10000]
        [--pass-every 1000000] [--shards 4] [--http 200000] [--http-threads 2,8] [--chdb]
        [--clickhouse http://127.0.0.1:8123/]
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
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
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


def _urls(backend: str, pg_url: str, ch_server: str, tmp: Path) -> tuple[str, str | None]:
    """(relational URL, ClickHouse URL) of a deployment."""
    if backend == "sqlite":
        return f"sqlite:///{tmp / 'bench.db'}", None
    if backend == "clickhouse":
        return pg_url, f"{ch_server}bench_{uuid.uuid4().hex[:10]}"
    if backend == "chdb":
        return pg_url, f"chdb://{tmp / 'chdb'}?database=bench"
    return pg_url, None


def worker(
    backend: str, n: int, batch: int, pg_admin: str, shards: int, pass_every: int, ch_server: str
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
    tmp = Path(tempfile.mkdtemp(prefix="cw-bench-"))
    out: dict[str, Any] = {"backend": backend, "records": n}
    try:
        database_url, clickhouse_url = _urls(backend, pg_url, ch_server, tmp)
        settings = Settings(
            database_url=database_url,
            run_jobs=False,
            clickhouse_url=clickhouse_url,
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
            if clickhouse_url and clickhouse_url.startswith("http"):
                ch.command(f"DROP DATABASE {ch.database}")
        out["peak_mib"] = _peak_mib()
        engine.dispose()
    finally:
        drop_database(pg_admin, pg_url)
        shutil.rmtree(tmp, ignore_errors=True)
    return out


BACKENDS = ("sqlite", "postgresql", "clickhouse")
HEADER = ("records", "deployment", "ingest rec/s", "pass rec/s", "values rec/s", "rollups s",
          "peak RSS MiB", "CH disk MiB")  # fmt: skip
WIDTHS = (11, 11, 13, 11, 13, 10, 13, 12)


def _run_size(args: argparse.Namespace, n: int, ch_server: str) -> dict[str, dict[str, Any]]:
    results = {}
    for backend in (*BACKENDS, *(("chdb",) if args.chdb else ())):
        cmd = [sys.executable, __file__, "--worker", backend, str(n),
               "--batch", str(args.batch), "--postgres", args.postgres, "--shards",
               str(args.shards), "--pass-every", str(args.pass_every),
               "--clickhouse", ch_server]  # fmt: skip
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
    return results


def _ratios(results: dict[str, dict[str, Any]]) -> None:
    if "postgresql" not in results or "clickhouse" not in results:
        return
    pg, ch = results["postgresql"], results["clickhouse"]
    pg_values, ch_values = pg["pass_s"] - pg["rollups_s"], ch["pass_s"] - ch["rollups_s"]
    print(
        f"{'':>11} {'ratio':>11} {pg['ingest_s'] / ch['ingest_s']:>12.2f}x "
        f"{pg['pass_s'] / ch['pass_s']:>10.2f}x {pg_values / ch_values:>12.2f}x"
        "   (PostgreSQL's seconds over ClickHouse's, same run)",
        flush=True,
    )


def _http_ingest(args: argparse.Namespace, ch_server: str) -> None:
    """Records/s posted to one `cachewatch serve` (bench/ingest.py's measure), on
    PostgreSQL alone and with ClickHouse holding the records, by each number of
    client threads in --http-threads (concurrent shippers: what ClickHouse's group
    commit of inserts works with)."""
    import ingest as http

    batches = http.make_batches(args.http, 1000, 16)
    for threads in (int(t) for t in args.http_threads.split(",")):
        rates = {}
        for backend in ("postgresql", "clickhouse"):
            with http.postgres_database(args.postgres, f"http_{backend}") as url:
                extra = {}
                if backend == "clickhouse":
                    extra["CACHEWATCH_CLICKHOUSE_URL"] = f"{ch_server}http_{uuid.uuid4().hex[:10]}"
                log = Path(tempfile.gettempdir()) / f"cw-bench-http-{backend}.log"
                with http.running_server(url, log, extra) as server:
                    wall, cpu = http.post_all(server, batches, threads=threads)
            rates[backend] = args.http / wall
            print(f"HTTP ingest {backend:>11}, {threads} threads: {rates[backend]:>9,.0f} rec/s "
                  f"({wall:.1f} s, server CPU {cpu:.1f} s)", flush=True)  # fmt: skip
        print(f"HTTP ingest ratio, {threads} threads: "
              f"{rates['clickhouse'] / rates['postgresql']:.2f}x "
              "(ClickHouse over PostgreSQL, same run)", flush=True)  # fmt: skip


@contextmanager
def _clickhouse_server(url: str | None) -> Iterator[str]:
    """`url`, or Debian's clickhouse-server started here on free loopback ports."""
    if url:
        yield url if url.endswith("/") else url + "/"
        return
    from tests.clickhouse.conftest import ServerProcess

    root = Path(tempfile.mkdtemp(prefix="cw-bench-chserver-"))
    server = ServerProcess(root)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000")
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--postgres", default=PG)
    parser.add_argument("--clickhouse", default=None, help="a server's base URL")
    parser.add_argument("--chdb", action="store_true", help="also the engine in-process")
    parser.add_argument("--http", type=int, default=200_000, help="0: no HTTP ingest")
    parser.add_argument("--http-threads", default="2,8", help="client threads, each a run")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--pass-every", type=int, default=1_000_000)
    parser.add_argument("--worker", nargs=2, metavar=("BACKEND", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        backend, n = args.worker
        result = worker(backend, int(n), args.batch, args.postgres, args.shards,
                        args.pass_every, args.clickhouse)  # fmt: skip
        print(json.dumps(result))
        return
    with _clickhouse_server(args.clickhouse) as ch_server:
        print(" ".join(f"{h:>{w}}" for h, w in zip(HEADER, WIDTHS, strict=True)))
        for n in [int(s) for s in args.sizes.split(",") if s]:
            _ratios(_run_size(args, n, ch_server))
        if args.http:
            _http_ingest(args, ch_server)


if __name__ == "__main__":
    main()
