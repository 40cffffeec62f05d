"""Ingestion with several API processes on one PostgreSQL database (issue 8; not a
test: prints numbers).

Starts P `cachewatch serve` processes (ingestion only: CACHEWATCH_RUN_JOBS=false) on
a fresh PostgreSQL database and posts N records (16 int block_hashes each, the
generator of bench/ingest.py) as NDJSON batches of 1,000 from T keep-alive client
threads, spread round-robin over the processes, like a load balancer would. Runs
each process count in --processes, each on its own fresh database, and prints
records/s and the CPU each server process used.

    .venv/bin/python bench/ingest_multi.py [--records 200000] [--processes 1,2]
        [--threads 4] [--postgres postgresql+psycopg://postgres@127.0.0.1:5432/test]
"""

import argparse
import os
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from pathlib import Path

import httpx
import psutil

PROJECT_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT_ROOT))

from bench.ingest import Server, make_batches, postgres_database, running_server, stored  # noqa: E402


def post_spread(servers: list[Server], batches: list[bytes], threads: int) -> float:
    """Seconds of wall time to post every batch; thread t talks to server t % P."""
    errors: list[str] = []

    def worker(server: Server, mine: list[bytes]) -> None:
        headers = {"Authorization": f"Bearer {server.token}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=120) as client:
            for body in mine:
                answer = client.post("/v1/usage", content=body)
                if answer.status_code != 200 or answer.json()["accepted"] != body.count(b"\n"):
                    errors.append(f"{answer.status_code} {answer.text[:300]}")
                    return

    for server in servers:  # warm-up outside the timing (imports, first connection)
        with httpx.Client(base_url=server.url, timeout=60) as client:
            client.post(
                "/v1/usage",
                headers={"Authorization": f"Bearer {server.token}"},
                content=b'{"request_id": "warm-%d", "ts": 0, "service": "s", "model": "m", '
                b'"prompt_tokens": 1}' % server.process.pid,
            )
    pool = [
        threading.Thread(target=worker, args=(servers[t % len(servers)], batches[t::threads]))
        for t in range(threads)
    ]
    started = time.perf_counter()
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"a batch was not fully accepted: {errors[0]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--blocks", type=int, default=16)
    parser.add_argument("--processes", default="1,2", help="server process counts to run")
    parser.add_argument("--threads", type=int, default=4, help="concurrent client threads")
    parser.add_argument("--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()
    print(
        f"{args.records:,} records, {args.blocks} int block_hashes each, NDJSON batches of "
        f"{args.batch:,}, {args.threads} client threads, loopback, PostgreSQL; "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start"
    )
    batches = make_batches(args.records, args.batch, args.blocks)
    with tempfile.TemporaryDirectory(prefix="cachewatch-bench-") as tmp:
        for count in [int(p) for p in args.processes.split(",")]:
            with postgres_database(args.postgres, f"multi{count}") as url, ExitStack() as stack:
                servers = [
                    stack.enter_context(running_server(url, Path(tmp) / f"server-{count}-{i}.log"))
                    for i in range(count)
                ]
                cpu = [psutil.Process(s.process.pid) for s in servers]
                before = [sum(p.cpu_times()[:2]) for p in cpu]
                elapsed = post_spread(servers, batches, args.threads)
                used = [sum(p.cpu_times()[:2]) - b for p, b in zip(cpu, before, strict=True)]
                stack.close()
                assert stored(url) - count == args.records  # minus the warm-ups
            rate = args.records / elapsed
            shares = ", ".join(f"{u / elapsed:.0%}" for u in used)
            print(
                f"{count} process(es): {rate:>9,.0f} records/s  ({elapsed:.1f} s; "
                f"server CPU {shares} of one core each)"
            )


if __name__ == "__main__":
    main()
