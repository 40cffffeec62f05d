"""Ingestion throughput: POST /v1/usage over loopback against the cost of storage alone.

Posts N records (16 hex-string block_hashes each, or ints) as NDJSON batches of 1,000 to a real
`cachewatch serve` it starts on a fresh SQLite file, then inserts the same rows
directly with SQLAlchemy Core executemany into another fresh migrated database,
one transaction per batch like the server (same pragmas: WAL, synchronous=FULL).
With --postgres URL the same against PostgreSQL, the floor there being a direct
COPY of the same rows. Each measure runs --repeat times on fresh databases and the
best run counts (the machine may be shared); every run is printed. Then issue 38's
measures: long prompts (`--long-records` records of `--long-blocks` hashes, ints
against hex strings) and, with `--rss N`, a flood of N records whose hashes never
repeat, the server's peak RSS with the hash memo against without one.

    .venv/bin/python bench/ingest.py [--records 200000] [--threads 1] [--repeat 3]
                                     [--gzip] [--hashes hex|int] [--rss 1000000] [--before DIR]
                                     [--postgres postgresql+psycopg://postgres@127.0.0.1:5432/test]
"""

import argparse
import gzip
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil
from sqlalchemy import create_engine, func, select

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

from _workers import cli, drop_database, fresh_database  # noqa: E402  (the bench folder: the script's own)

from service import migrate  # noqa: E402
from service.db import make_engine  # noqa: E402
from service.ingest.records import UsageRecordIn, to_row  # noqa: E402
from service.models import UsageRecord  # noqa: E402
from service.repository import USAGE_COLUMNS, USAGE_TABLE, usage_row_values  # noqa: E402
from service.repository.sqlite_insert import plan_inserts  # noqa: E402
from service.server_process import free_port, start_server, stop_server  # noqa: E402
from service.settings import Settings  # noqa: E402

GOAL_RATE = 50_000
GOAL_RATIO = 0.5
# Issue 38: HTTP ingest against the raw sqlite3 insert of the same rows; hex hashes
# against ints on long prompts; PostgreSQL's HTTP ingest against a direct COPY (no
# lower than before the issue); peak RSS on a flood of new hashes, memo against none.
GOAL_RAW_RATIO = 0.6
GOAL_HEX_RATIO = 0.8
GOAL_COPY_RATIO = 0.66
GOAL_RSS_RATIO = 1.2


def make_batches(
    records: int, batch_size: int, blocks: int, hashes: str = "int", recurring: bool = True
) -> list[bytes]:
    """NDJSON bodies. Hashes look like Mooncake's: shared prefixes, growing ids
    (a session of 8 records starts 64 ids after the one before), as ints or as the
    16-digit hex strings `cachewatch_client.fingerprint` emits. Not `recurring`: every hash
    is new (record i holds ids i * blocks ..), the worst case of a memo."""
    batches = []
    for start in range(0, records, batch_size):
        lines = []
        for i in range(start, min(start + batch_size, records)):
            session = i // 8
            first = session * 64 if recurring else i * blocks
            ids = range(first, first + blocks)
            lines.append(
                orjson.dumps(
                    {
                        "request_id": f"bench-{i:09d}",
                        "ts": 1_714_564_800 + i / 100,
                        "service": f"svc-{i % 4}",
                        "model": "llama-3-70b",
                        "prompt_tokens": blocks * 512,
                        "cached_tokens": (i % blocks) * 512,
                        "completion_tokens": 200,
                        "ttft_ms": 120.5,
                        "replica": f"pod-{i % 8}",
                        "session_id": f"s-{session}",
                        "block_size": 512,
                        "block_hashes": [f"{h:016x}" for h in ids]
                        if hashes == "hex"
                        else list(ids),
                    }
                )
            )
        batches.append(b"\n".join(lines) + b"\n")
    return batches


def rows_of(batches: list[bytes]) -> list[list[dict[str, Any]]]:
    """The rows the server would store, built outside the timed part."""
    received_us = time.time_ns() // 1000
    return [
        [
            to_row(UsageRecordIn.model_validate(orjson.loads(line)), received_us)
            for line in body.splitlines()
        ]
        for body in batches
    ]


@dataclass
class Server:
    url: str
    token: str
    process: subprocess.Popen[bytes]


@contextmanager
def running_server(
    database_url: str,
    log_path: Path,
    extra_env: dict[str, str] | None = None,
    code: Path = PROJECT_ROOT,
) -> Iterator[Server]:
    """`cachewatch serve` of the service code in `code` (this checkout, or another
    one's for a before/after run) on a migrated `database_url`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEWATCH_")}
    env["CACHEWATCH_DATABASE_URL"] = database_url
    env.update(extra_env or {})
    # Ingestion alone: an analytics pass in the same process would compete for the GIL.
    env["CACHEWATCH_RUN_JOBS"] = "false"
    cli(code, env, "migrate")
    token = cli(code, env, "token", "create", "--scope", "ingest", "--name", "bench")
    port = free_port()
    process = start_server(env, port, log_path, cwd=code)
    try:
        yield Server(f"http://127.0.0.1:{port}", token, process)
    finally:
        stop_server(process)


def post_all(
    server: Server, batches: list[bytes], threads: int, compress: bool = False
) -> tuple[float, float]:
    """Seconds of wall time, and CPU seconds the server process spent. With
    `compress`, each body is sent gzipped (compressed before the timing)."""
    headers = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/x-ndjson"}
    if compress:
        headers["Content-Encoding"] = "gzip"
    sent = {id(body): gzip.compress(body, 6) if compress else body for body in batches}
    errors: list[str] = []

    def worker(mine: list[bytes]) -> None:
        # One keep-alive connection per thread.
        with httpx.Client(base_url=server.url, headers=headers, timeout=60) as client:
            for body in mine:
                answer = client.post("/v1/usage", content=sent[id(body)])
                expected = body.count(b"\n")
                if answer.status_code != 200 or answer.json()["accepted"] != expected:
                    errors.append(f"{answer.status_code} {answer.text[:300]}")
                    return

    # Warm-up outside the timing: imports, first connection, the token lookup path.
    with httpx.Client(base_url=server.url, headers=headers, timeout=60) as client:
        warm_up = (
            b'{"request_id": "warm-up", "ts": 0, "service": "s", "model": "m", "prompt_tokens": 1}'
        )
        client.post("/v1/usage", content=gzip.compress(warm_up) if compress else warm_up)
    cpu = psutil.Process(server.process.pid)
    cpu_before = sum(cpu.cpu_times()[:2])
    pool = [threading.Thread(target=worker, args=(batches[t::threads],)) for t in range(threads)]
    started = time.perf_counter()
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"a batch was not fully accepted: {errors[0]}")
    return elapsed, sum(cpu.cpu_times()[:2]) - cpu_before


def peak_rss_mib(server: Server) -> float:
    """The server process's peak resident memory so far (VmHWM)."""
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1]) / 1024


def http_rate(
    database_url: str,
    batches: list[bytes],
    log_path: Path,
    extra_env: dict[str, str] | None = None,
    code: Path = PROJECT_ROOT,
) -> tuple[float, float, float]:
    """Records/s of one HTTP run into a fresh database, server CPU us/record, and the
    server's peak RSS in MiB."""
    with running_server(database_url, log_path, extra_env, code) as server:
        elapsed, cpu = post_all(server, batches, 1)
        peak = peak_rss_mib(server)
    count = stored(database_url) - 1  # the warm-up record
    return count / elapsed, cpu / count * 1e6, peak


def stored(database_url: str) -> int:
    engine = create_engine(database_url)
    with engine.connect() as conn:
        count = conn.scalar(select(func.count()).select_from(UsageRecord)) or 0
    engine.dispose()
    return count


def migrated_engine(database_url: str) -> Any:
    engine = make_engine(Settings(database_url=database_url))
    migrate.upgrade(engine)
    return engine


def direct_executemany(database_url: str, rows: list[list[dict[str, Any]]]) -> float:
    engine = migrated_engine(database_url)
    insert = USAGE_TABLE.insert()
    started = time.perf_counter()
    for batch in rows:
        with engine.begin() as conn:
            conn.execute(insert, batch)
    elapsed = time.perf_counter() - started
    engine.dispose()
    return elapsed


def raw_sqlite3_inserts(database_url: str, rows: list[list[dict[str, Any]]]) -> float:
    """Context, not the goal's floor: the same rows as ready tuples through the
    sqlite3 module with the server's statements (`plan_inserts`) and pragmas, no
    SQLAlchemy and no HTTP. What SQLite itself costs with the table's four indexes."""
    engine = migrated_engine(database_url)
    values = [[usage_row_values(row) for row in batch] for batch in rows]
    started = time.perf_counter()
    with engine.connect() as conn:
        driver = conn.connection.driver_connection
        assert isinstance(driver, sqlite3.Connection)
        limit = driver.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
        for batch in values:
            driver.execute("BEGIN IMMEDIATE")
            for insert in plan_inserts("usage_records", USAGE_COLUMNS, "request_id", batch, limit):
                run = driver.executemany if insert.many else driver.execute
                run(insert.statement, insert.parameters)
            driver.execute("COMMIT")
    elapsed = time.perf_counter() - started
    engine.dispose()
    return elapsed


def raw_sqlite3_executemany(database_url: str, rows: list[list[dict[str, Any]]]) -> float:
    """Issue 38's floor: the same rows as ready tuples through the sqlite3 module's
    `executemany` of one plain INSERT of every column (no conflict clause: the rows
    are new), the server's pragmas and schema, 1,000 rows a transaction."""
    engine = migrated_engine(database_url)
    values = [[usage_row_values(row) for row in batch] for batch in rows]
    statement = (
        f"INSERT INTO usage_records ({', '.join(USAGE_COLUMNS)}) "
        f"VALUES ({', '.join('?' * len(USAGE_COLUMNS))})"
    )
    started = time.perf_counter()
    with engine.connect() as conn:
        driver = conn.connection.driver_connection
        assert isinstance(driver, sqlite3.Connection)
        for batch in values:
            driver.execute("BEGIN IMMEDIATE")
            driver.executemany(statement, batch)
            driver.execute("COMMIT")
    elapsed = time.perf_counter() - started
    engine.dispose()
    return elapsed


def direct_copy(database_url: str, rows: list[list[dict[str, Any]]]) -> float:
    engine = migrated_engine(database_url)
    columns = ", ".join(USAGE_COLUMNS)
    started = time.perf_counter()
    for batch in rows:
        with engine.begin() as conn:
            driver = conn.connection.driver_connection
            assert driver is not None
            with (
                driver.cursor() as cursor,
                cursor.copy(f"COPY usage_records ({columns}) FROM STDIN") as copy,
            ):
                for row in batch:
                    copy.write_row(usage_row_values(row))
    elapsed = time.perf_counter() - started
    engine.dispose()
    return elapsed


@contextmanager
def postgres_database(admin_url: str, label: str) -> Iterator[str]:
    url = fresh_database(admin_url, Path(tempfile.gettempdir()), label)
    try:
        yield url
    finally:
        drop_database(admin_url, url)


def report(
    backend: str, floor_name: str, count: int, http: list[tuple[float, float]], floors: list[float]
) -> tuple[float, float]:
    """Best of the repetitions: the machine may be shared, and the best run is the
    one least disturbed by other load."""
    http_s, server_cpu_s = min(http)
    floor_s = min(floors)
    http_rate, floor_rate = count / http_s, count / floor_s
    ratio = http_rate / floor_rate
    runs = ", ".join(f"{count / s:,.0f}" for s, _ in http)
    print(f"{backend:<9} POST /v1/usage      {http_rate:>9,.0f} records/s  (runs: {runs})")
    print(
        f"{backend:<9}   server CPU        {server_cpu_s / count * 1e6:>9.1f} us/record "
        f"({server_cpu_s / http_s:.0%} of wall: the server is "
        + ("CPU-bound)" if server_cpu_s / http_s > 0.8 else "waiting on the database)")
    )
    runs = ", ".join(f"{count / s:,.0f}" for s in floors)
    print(f"{backend:<9} direct {floor_name:<12} {floor_rate:>9,.0f} records/s  (runs: {runs})")
    print(f"{backend:<9} ratio http/direct   {ratio:>9.2f}" + before_ratio(backend, floor_rate))
    return http_rate, ratio


def run(
    backend: str,
    floor_name: str,
    new_database: Callable[[str], AbstractContextManager[str]],
    floor: Callable[[str, list[list[dict[str, Any]]]], float],
    batches: list[bytes],
    rows: list[list[dict[str, Any]]],
    args: argparse.Namespace,
    workdir: Path,
) -> tuple[float, float]:
    http: dict[Path, list[tuple[float, float]]] = {code: [] for code in codes(args)}
    floors: list[float] = []
    for attempt in range(args.repeat):
        for code, runs in http.items():
            with new_database(f"http{attempt}-{code.name}") as http_url:
                log_path = workdir / f"server-{backend}-{attempt}.log"
                with running_server(http_url, log_path, code=code) as server:
                    runs.append(post_all(server, batches, args.threads, args.gzip))
                count = stored(http_url) - 1  # the warm-up record
                assert count == args.records, f"{count} stored of {args.records}"
        with new_database(f"direct{attempt}") as direct_url:
            floors.append(floor(direct_url, rows))
            assert stored(direct_url) == args.records
    if args.before:
        before = args.records / min(http[args.before])[0]
        BEFORE_RATES[backend] = before
        print(
            f"{backend:<9} before: POST /v1/usage {before:>9,.0f} records/s  (runs: "
            + ", ".join(f"{args.records / s:,.0f}" for s, _ in http[args.before])
            + f"; {args.before})"
        )
    return report(backend, floor_name, args.records, http[PROJECT_ROOT], floors)


def codes(args: argparse.Namespace) -> list[Path]:
    """The service code measured: `--before`'s checkout first, then this one."""
    return [args.before, PROJECT_ROOT] if args.before else [PROJECT_ROOT]


def before_ratio(backend: str, floor_rate: float) -> str:
    rate = BEFORE_RATES.get(backend)
    return "" if rate is None else f" (before: {rate / floor_rate:.2f})"


BEFORE_RATES: dict[str, float] = {}


def print_goal(backend: str, floor_name: str, rate: float, ratio: float) -> None:
    met = rate >= GOAL_RATE and ratio >= GOAL_RATIO
    print(
        f"{backend:<9} goal >= {GOAL_RATE:,} records/s and >= {GOAL_RATIO} of direct "
        f"{floor_name}: " + ("met" if met else "MISSED")
    )


def long_prompts(args: argparse.Namespace, workdir: Path) -> None:
    """Issue 38's long prompts: records of `--long-blocks` hashes, ints against hex
    strings, over HTTP into SQLite, alternated in one run (best of --repeat each),
    with `--before` that code's server too."""
    runs: dict[tuple[Path, str], list[float]] = {
        (code, kind): [] for code in codes(args) for kind in ("int", "hex")
    }
    batches = {
        kind: make_batches(args.long_records, 100, args.long_blocks, kind)
        for kind in ("int", "hex")
    }
    for _ in range(args.repeat):
        for (code, kind), rates in runs.items():
            url = f"sqlite:///{workdir / f'long-{kind}-{len(rates)}-{code.name}.db'}"
            rate, _, _ = http_rate(url, batches[kind], workdir / "long.log", code=code)
            rates.append(rate)
    for code in codes(args):
        label = "before" if code != PROJECT_ROOT else "long"
        best = {kind: max(runs[code, kind]) for kind in ("int", "hex")}
        for kind in best:
            print(
                f"{label:<9} {args.long_blocks:,} {kind:<3} hashes a record  "
                f"{best[kind]:>9,.0f} records/s"
                f" ({best[kind] * args.long_blocks / 1e6:.2f} M hashes/s; runs: "
                + ", ".join(f"{r:,.0f}" for r in runs[code, kind])
                + ")"
            )
        ratio = best["hex"] / best["int"]
        goal = f"  goal >= {GOAL_HEX_RATIO}: " + ("met" if ratio >= GOAL_HEX_RATIO else "MISSED")
        print(
            f"{label:<9} ratio hex/int           {ratio:>9.2f}" + (goal if label == "long" else "")
        )


def never_repeating(args: argparse.Namespace, workdir: Path) -> None:
    """Issue 38's memory bound: `--rss` records whose hashes never repeat (16 hex a
    record): the server's peak RSS and rate with `--before`'s code against this
    one's, or without one, this code with no memo (`CACHEWATCH_HASH_MEMO_ENTRIES=0`)
    against the default memo."""
    batches = make_batches(args.rss, args.batch, 16, "hex", recurring=False)
    cases: list[tuple[str, dict[str, str], Path]] = (
        [("before", {}, args.before), ("after", {}, PROJECT_ROOT)]
        if args.before
        else [
            ("no memo", {"CACHEWATCH_HASH_MEMO_ENTRIES": "0"}, PROJECT_ROOT),
            ("memo", {}, PROJECT_ROOT),
        ]
    )
    results = {}
    for label, env, code in cases:
        url = f"sqlite:///{workdir / ('rss-' + label.replace(' ', '-') + '.db')}"
        results[label] = http_rate(url, batches, workdir / "rss.log", env, code)
        rate, cpu_us, peak = results[label]
        print(
            f"flood     {args.rss:,} records, hashes never repeat, {label:<7}: {rate:>9,.0f} "
            f"records/s, server CPU {cpu_us:.1f} us/record, peak RSS {peak:,.0f} MiB"
        )
    (first, *_), (second, *_) = cases
    ratio = results[second][2] / results[first][2]
    print(
        f"flood     peak RSS {second}/{first} {ratio:>9.2f}  goal <= {GOAL_RSS_RATIO}: "
        + ("met" if ratio <= GOAL_RSS_RATIO else "MISSED")
        + f"; rate {second}/{first} {results[second][0] / results[first][0]:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--blocks", type=int, default=16, help="block_hashes per record")
    parser.add_argument("--hashes", choices=("hex", "int"), default="hex")
    parser.add_argument("--threads", type=int, default=1, help="concurrent client threads")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the best counts")
    parser.add_argument("--gzip", action="store_true", help="send the batches gzipped")
    parser.add_argument("--postgres", metavar="URL", help="also run against this PostgreSQL")
    parser.add_argument("--long-records", type=int, default=5_000)
    parser.add_argument("--long-blocks", type=int, default=1_000, help="0: no long prompts")
    parser.add_argument("--rss", type=int, default=0, metavar="N", help="the flood of N records")
    parser.add_argument(
        "--before",
        type=Path,
        metavar="DIR",
        help="also measure the server of this checkout (a worktree of an earlier commit)",
    )
    args = parser.parse_args()
    if args.before:
        args.before = args.before.resolve()

    print(
        f"{args.records:,} records, {args.blocks} {args.hashes} block_hashes each, NDJSON "
        f"batches of {args.batch:,}, {args.threads} keep-alive client thread(s), loopback; "
        f"best of {args.repeat}; {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.2f} at start"
    )
    batches = make_batches(args.records, args.batch, args.blocks, args.hashes)
    print(f"body: {sum(map(len, batches)) / len(batches) / 1024:.0f} KiB per batch")
    rows = rows_of(batches)

    with tempfile.TemporaryDirectory(prefix="cachewatch-bench-") as tmp:
        workdir = Path(tmp)

        @contextmanager
        def sqlite_database(label: str) -> Iterator[str]:
            yield f"sqlite:///{workdir / (label + '.db')}"

        rate, ratio = run(
            "sqlite",
            "executemany",
            sqlite_database,
            direct_executemany,
            batches,
            rows,
            args,
            workdir,
        )
        raw = []
        for attempt in range(args.repeat):
            raw.append(raw_sqlite3_inserts(f"sqlite:///{workdir / f'raw{attempt}.db'}", rows))
        raw_rate = args.records / min(raw)
        print(
            f"sqlite    (context) raw sqlite3, the server's statements {raw_rate:,.0f} records/s, "
            f"no SQLAlchemy, no HTTP: SQLite's own cost; http/raw {rate / raw_rate:.2f}"
            + before_ratio("sqlite", raw_rate)
        )
        plain = [
            raw_sqlite3_executemany(f"sqlite:///{workdir / f'plain{attempt}.db'}", rows)
            for attempt in range(args.repeat)
        ]
        plain_rate = args.records / min(plain)
        print(
            f"sqlite    raw sqlite3 executemany   {plain_rate:>9,.0f} records/s  (runs: "
            + ", ".join(f"{args.records / s:,.0f}" for s in plain)
            + f"); http/raw executemany {rate / plain_rate:.2f}"
            + before_ratio("sqlite", plain_rate)
        )
        print_goal("sqlite", "executemany", rate, ratio)
        print(
            f"sqlite    goal http/raw sqlite3 executemany >= {GOAL_RAW_RATIO}: "
            + ("met" if rate / plain_rate >= GOAL_RAW_RATIO else "MISSED")
        )
        if args.postgres:
            url = args.postgres

            def pg_database(label: str) -> AbstractContextManager[str]:
                return postgres_database(url, label)

            rate, ratio = run(
                "postgres", "COPY", pg_database, direct_copy, batches, rows, args, workdir
            )
            print_goal("postgres", "COPY", rate, ratio)
            print(
                f"postgres  goal http/COPY >= {GOAL_COPY_RATIO} (the issue's figure of before): "
                + ("met" if ratio >= GOAL_COPY_RATIO else "MISSED")
            )
        if args.long_blocks:
            long_prompts(args, workdir)
        if args.rss:
            never_repeating(args, workdir)


if __name__ == "__main__":
    main()
