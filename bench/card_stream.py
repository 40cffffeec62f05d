"""A shuffled stream shipped while the jobs run (issue 32; not a test: prints numbers).

The records: `--services` services over 6 hours, a request every `--every-s`
seconds each, 2,000-token prompts on 16 blocks. A third of the services lose their
warm start at hour 3 for good (a new deploy tag with it), a third lose it from
hour 2 to hour 4, a third never change: regressions of known number and time.

* once: a fresh database, `cachewatch serve` without jobs, the records posted in
  time order, then one `cachewatch detect`.
* streamed: a fresh database, `cachewatch serve` with its jobs every
  `--interval-s` seconds (analytics) and every `--detect-s` (detection), the
  records shuffled and posted by two shippers in batches of 1,000, half a second
  apart (a 503 retried after its Retry-After, as a shipper does); then, with the server stopped, one
  `cachewatch detect`, as the next run would.

It prints both sets of regressions' (service, group, cause, change bucket, status),
how many match, and the posts: how many, their longest wait, how many got 503 (goal:
the same regressions; no 503 caused by our own passes).

    .venv/bin/python bench/card_stream.py [--services 12] [--every-s 4]
        [--database-url postgresql+psycopg://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from _workers import cli, drop_database, fresh_database  # the bench folder: the script's own

ROOT = Path(__file__).resolve().parent.parent
HOUR_S = 3600
T0 = 1_767_225_600 + 8 * HOUR_S  # 2026-01-01T08:00:00Z
BATCH = 1_000
#: Between a shipper's posts: the stream lasts many passes of the jobs.
PAUSE_S = 0.5
#: The server's lines about steps longer than half the busy timeout.
LONG_STEPS: list[str] = []


def records(services: int, every_s: float, seed: int = 1) -> list[dict[str, Any]]:
    """The module docstring's records, in time order."""
    rng = random.Random(seed)
    out = []
    for k in range(services):
        kind = k % 3  # 0: lost at hour 3 for good; 1: lost from hour 2 to 4; 2: steady
        t, i = T0 + rng.uniform(0, every_s), 0
        while t < T0 + 6 * HOUR_S:
            hour = (t - T0) / HOUR_S
            lost = (kind == 0 and hour >= 3) or (kind == 1 and 2 <= hour < 4)
            start = [k * 1_000 + b for b in range(14)]
            if lost:  # every request starts differently: a timestamp at the top
                start = [10**9 + k * 10**6 + i, *start[1:]]
            out.append(
                {
                    "request_id": f"s{k}-{i}",
                    "ts": round(t, 3),
                    "service": f"svc-{k}",
                    "model": "model-a",
                    "deploy": "v2" if kind == 0 and hour >= 3 else "v1",
                    "session_id": f"s{k}-{i % 40}",
                    "prompt_tokens": 2_000,
                    "cached_tokens": 0 if lost else rng.choice([1_664, 1_792]),
                    "block_size": 128,
                    "block_hashes": [*start, 10**12 + k * 10**7 + i, 2 * 10**12 + i],
                    "completion_tokens": 100,
                }
            )
            t, i = t + rng.expovariate(1 / every_s), i + 1
    out.sort(key=lambda r: r["ts"])
    return out


class Shipper:
    """Posts its batches one after another, retrying a 503 after its Retry-After;
    notes each post's wall time and status."""

    def __init__(self, base_url: str, token: str, batches: list[list[dict[str, Any]]]) -> None:
        self.client = httpx.Client(
            base_url=base_url,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"},
            timeout=300,
        )
        self.batches, self.posts = batches, []  # type: list[tuple[float, int]]
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        for batch in self.batches:
            body = b"\n".join(orjson.dumps(r) for r in batch) + b"\n"
            while True:
                started = time.perf_counter()
                answer = self.client.post("/v1/usage", content=body)
                self.posts.append((time.perf_counter() - started, answer.status_code))
                if answer.status_code != 503:
                    answer.raise_for_status()
                    break
                time.sleep(float(answer.headers.get("Retry-After", "1")))
            time.sleep(PAUSE_S)


def _serve(code: Path, url: str, tmp: Path, env_extra: dict[str, str], ship: Any) -> None:
    from service.server_process import free_port, start_server, stop_server

    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEWATCH_")}
    env |= {"CACHEWATCH_DATABASE_URL": url, "PYTHONPATH": str(code), **env_extra}
    cli(code, env | {"CACHEWATCH_RUN_JOBS": "false"}, "migrate")
    token = cli(code, env, "token", "create", "--scope", "ingest", "--name", "bench")
    port = free_port()
    server = start_server(env, port, tmp / f"server-{port}.log", cwd=code)
    try:
        ship(f"http://127.0.0.1:{port}", token)
    finally:
        stop_server(server)
    log = (tmp / f"server-{port}.log").read_text()
    LONG_STEPS.extend(line for line in log.splitlines() if "one step took" in line)
    cli(code, env | {"CACHEWATCH_RUN_JOBS": "false"}, "detect")


def _regressions(url: str) -> list[tuple[Any, ...]]:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT service, group_by, group_value, cause, change_ts_us / 300000000, status"
                " FROM regressions ORDER BY 1, 2, 3, 5"
            )
        ).all()
    engine.dispose()
    return [tuple(r) for r in rows]


def measure(
    code: Path, base_url: str | None, services: int, every_s: float, interval_s: int, detect_s: int
) -> dict[str, Any]:
    data = records(services, every_s)
    shuffled = data[:]
    random.Random(7).shuffle(shuffled)
    batches = [shuffled[i : i + BATCH] for i in range(0, len(shuffled), BATCH)]
    shippers: list[Shipper] = []

    def once(base: str, token: str) -> None:
        Shipper(base, token, [data[i : i + BATCH] for i in range(0, len(data), BATCH)])._run()

    def streamed(base: str, token: str) -> None:
        shippers.extend(Shipper(base, token, batches[k::2]) for k in range(2))
        for shipper in shippers:
            shipper.thread.start()
        for shipper in shippers:
            shipper.thread.join()
        time.sleep(2 * interval_s)  # the jobs go on a little after the last post

    jobs = {
        "CACHEWATCH_ANALYTICS_INTERVAL_S": str(interval_s),
        "CACHEWATCH_DETECT_INTERVAL_S": str(detect_s),
    }
    with tempfile.TemporaryDirectory(prefix="cw-card-stream-") as tmp_name:
        tmp = Path(tmp_name)
        urls = [fresh_database(base_url, tmp, label) for label in ("once", "streamed")]
        try:
            started = time.perf_counter()
            _serve(code, urls[0], tmp, {"CACHEWATCH_RUN_JOBS": "false"}, once)
            once_s = time.perf_counter() - started
            started = time.perf_counter()
            _serve(code, urls[1], tmp, jobs, streamed)
            streamed_s = time.perf_counter() - started
            found = [_regressions(u) for u in urls]
        finally:
            for url in urls:
                drop_database(base_url, url)
    posts = [p for s in shippers for p in s.posts]
    return {
        "records": len(data),
        "once": found[0],
        "streamed": found[1],
        "once_s": once_s,
        "streamed_s": streamed_s,
        "posts": len(posts),
        "longest_wait_s": max(w for w, _ in posts),
        "busy": sum(1 for _, s in posts if s == 503),
    }


def run(
    services: int = 12,
    every_s: float = 4.0,
    interval_s: int = 2,
    detect_s: int = 5,
    code: Path = ROOT,
    database_url: str | None = None,
) -> list[str]:
    out = measure(code, database_url, services, every_s, interval_s, detect_s)
    once, streamed = out["once"], out["streamed"]
    matched = len(set(once) & set(streamed))
    backend = "SQLite" if database_url is None else "PostgreSQL"
    lines = [
        f"a shuffled stream shipped while the jobs run ({backend}, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.2f}): {out['records']:,} records of {services} services "
        f"over 6 h; analytics every {interval_s} s, detection every {detect_s} s",
        f"one pass over the data in order: {len(once)} regressions ({out['once_s']:.0f} s)",
        f"streamed: {len(streamed)} regressions, {matched} the same as one pass's "
        f"(service, group, cause, 5-minute change bucket, status) ({out['streamed_s']:.0f} s)",
        f"posts: {out['posts']}, longest {out['longest_wait_s']:.2f} s, 503: {out['busy']}",
    ]
    lines += [f"  server: {line}" for line in LONG_STEPS]
    lines += [f"  only once: {r}" for r in sorted(set(once) - set(streamed))]
    lines += [f"  only streamed: {r}" for r in sorted(set(streamed) - set(once))]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--services", type=int, default=12)
    parser.add_argument("--every-s", type=float, default=4.0)
    parser.add_argument("--interval-s", type=int, default=2)
    parser.add_argument("--detect-s", type=int, default=5)
    parser.add_argument("--code", type=Path, default=ROOT)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    for line in run(
        args.services,
        args.every_s,
        args.interval_s,
        args.detect_s,
        args.code.resolve(),
        args.database_url,
    ):
        print(line, flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
