"""A late record after a long history (issue 32; not a test: prints numbers).

Records on N distinct days (default 2,000 days of `--per-day` records each, an hour
of bench/_synthetic.py's traffic squeezed into the first hour of each day) on a
fresh SQLite database: the first analytics pass over them, then ONE late record
(from 1970, or with `--late first` from the first day) and the pass that takes it,
its time against the first pass's (goal: a late record costs the hours it can
change, not every later day). Meanwhile a thread posts batches of new records to a
real `cachewatch serve` on that database (no jobs of its own) and records how long
each post waited and how many got 503 (goal: none; the pass commits in steps).

The passes run as the background job runs them: with a step-wise pass (the service's
`catch_up_step`), one transaction per step; otherwise one `catch_up` transaction.
Each pass runs in its own process, `--code DIR` running another checkout's service
code (e.g. a worktree of the commit before) with this bench.

    .venv/bin/python bench/card_late.py [--days 2000] [--per-day 50] [--late 1970|first]
        [--code DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
from _workers import cli, run_worker  # the bench folder: the script's own

ROOT = Path(__file__).resolve().parent.parent
HOUR_US = 3600 * 1_000_000
DAY_US = 24 * HOUR_US
POST_EVERY_S = 0.2
POST_RECORDS = 200


# --- in the worker processes --------------------------------------------------


def _engine(url: str) -> Any:
    from service import migrate
    from service.db import make_engine
    from service.settings import Settings

    settings = Settings(database_url=url, run_jobs=False, reuse_window_s=3600.0)
    engine = make_engine(settings)
    migrate.upgrade(engine)
    return settings, engine


def worker_fill(url: str, days: int, per_day: int) -> dict[str, Any]:
    """`per_day` synthetic records in the first hour of each of `days` days."""
    sys.path.insert(0, str(ROOT / "bench"))
    from _synthetic import START_US, requests  # type: ignore[import-not-found]

    from service import repository

    _, engine = _engine(url)
    frame = requests(days * per_day).drop("id")
    empty = {c: None for c in repository.USAGE_COLUMNS} | {"cache_write_tokens": 0}
    rows = []
    for i, r in enumerate(frame.to_dicts()):
        day, k = divmod(i, per_day)
        ts = START_US + day * DAY_US + k * (HOUR_US // per_day)
        rows.append({**empty, **r, "ts_us": ts, "received_us": ts, "request_id": f"r{i}"})
    for start in range(0, len(rows), 20_000):
        with engine.begin() as conn:
            conn.execute(repository.USAGE_TABLE.insert(), rows[start : start + 20_000])
    engine.dispose()
    return {"records": len(rows), "last_us": rows[-1]["ts_us"]}


def worker_late(url: str, ts_us: int) -> dict[str, Any]:
    """One record at `ts_us`, sharing the first record's blocks."""
    from sqlalchemy import select

    from service import repository

    _, engine = _engine(url)
    table = repository.USAGE_TABLE
    with engine.begin() as conn:
        first = conn.execute(select(table).order_by(table.c.id).limit(1)).mappings().one()
        row = {k: v for k, v in first.items() if k != "id"}
        row |= {"ts_us": ts_us, "received_us": ts_us, "request_id": "late-1"}
        conn.execute(table.insert(), [row])
    engine.dispose()
    return {}


def worker_pass(url: str) -> dict[str, Any]:
    """The pass as the background job runs it; its wall time and steps."""
    from service.db import make_sessionmaker
    from service.services import analytics_pass

    settings, engine = _engine(url)
    factory = make_sessionmaker(engine)
    step = getattr(analytics_pass, "catch_up_step", None)
    started = time.perf_counter()
    steps, records, longest = 0, 0, 0.0
    more = True
    while more:
        begun = time.perf_counter()
        with factory.begin() as session:
            report = (step or analytics_pass.catch_up)(session, settings)
        longest = max(longest, time.perf_counter() - begun)
        steps, records = steps + 1, records + report.records
        more = step is not None and bool(getattr(report, "more", False))
    took = time.perf_counter() - started
    engine.dispose()
    return {"pass_s": took, "steps": steps, "records": records, "longest_step_s": longest}


# --- in the parent ------------------------------------------------------------


def _worker(code: Path, *args: str) -> dict[str, Any]:
    return run_worker(__file__, code, *args)


class Poster:
    """Posts a batch of new records every POST_EVERY_S to the server until stopped,
    noting each post's wall time and status."""

    def __init__(self, base_url: str, token: str, first_us: int) -> None:
        self.client = httpx.Client(
            base_url=base_url,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/x-ndjson"},
            timeout=120,
        )
        self.next_us, self.sent = first_us, 0
        self.waits: list[tuple[float, int]] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _body(self) -> bytes:
        lines = []
        for _ in range(POST_RECORDS):
            self.sent += 1
            self.next_us += 1_000_000
            record = {
                "request_id": f"post-{self.sent}",
                "ts": self.next_us / 1e6,
                "service": "svc-0",
                "model": "model-a",
                "prompt_tokens": 2048,
                "cached_tokens": 1024,
                "block_size": 512,
                "block_hashes": [1, 2, 3, self.sent],
            }
            lines.append(orjson.dumps(record))
        return b"\n".join(lines) + b"\n"

    def _loop(self) -> None:
        while not self.stop.is_set():
            body = self._body()
            started = time.perf_counter()
            status = self.client.post("/v1/usage", content=body).status_code
            self.waits.append((time.perf_counter() - started, status))
            self.stop.wait(POST_EVERY_S)

    def __enter__(self) -> Poster:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()
        self.client.close()


def measure(code: Path, days: int, per_day: int, late: str) -> dict[str, Any]:
    from service.server_process import free_port, start_server, stop_server

    with tempfile.TemporaryDirectory(prefix="cw-card-late-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'late.db'}"
        filled = _worker(code, "fill", url, str(days), str(per_day))
        first = _worker(code, "pass", url)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEWATCH_")}
        env |= {"CACHEWATCH_DATABASE_URL": url, "CACHEWATCH_RUN_JOBS": "false"}
        env["PYTHONPATH"] = str(code)
        token = cli(code, env, "token", "create", "--scope", "ingest", "--name", "bench")
        port = free_port()
        server = start_server(env, port, Path(tmp) / "server.log", cwd=code)
        try:
            sys.path.insert(0, str(ROOT / "bench"))
            from _synthetic import START_US  # type: ignore[import-not-found]

            late_us = 3_600_000_000 if late == "1970" else START_US + 1_800_000_000
            _worker(code, "late", url, str(late_us))
            with Poster(f"http://127.0.0.1:{port}", token, filled["last_us"] + HOUR_US) as poster:
                time.sleep(1.0)  # a few posts before the pass: their normal wait
                second = _worker(code, "pass", url)
                time.sleep(1.0)
        finally:
            stop_server(server)
    waits = poster.waits
    return {
        "records": filled["records"],
        "first": first,
        "late": second,
        "posts": len(waits),
        "longest_wait_s": max(w for w, _ in waits),
        "not_200": sum(1 for _, s in waits if s != 200),
    }


def run(days: int = 2000, per_day: int = 50, code: Path = ROOT, late: str = "1970") -> list[str]:
    """The lines to print (bench/cardinality.py calls this)."""
    m = measure(code, days, per_day, late)
    first, second = m["first"], m["late"]
    ratio = second["pass_s"] / first["pass_s"] if first["pass_s"] else float("nan")
    return [
        f"records on {days:,} distinct days: {m['records']:,} ({per_day} a day)",
        f"first pass: {first['pass_s']:.1f} s in {first['steps']} step(s), "
        f"longest step {first['longest_step_s']:.2f} s",
        f"one late record ({late}): pass {second['pass_s']:.2f} s in {second['steps']} "
        f"step(s), longest step {second['longest_step_s']:.2f} s; "
        f"ratio to the first pass {ratio:.3f}",
        f"ingest meanwhile: {m['posts']} posts of {POST_RECORDS} records, longest wait "
        f"{m['longest_wait_s']:.2f} s, {m['not_200']} not 200",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=2000)
    parser.add_argument("--per-day", type=int, default=50)
    parser.add_argument("--late", choices=("1970", "first"), default="1970")
    parser.add_argument("--code", type=Path, default=ROOT)
    parser.add_argument("--worker", nargs="+")
    args = parser.parse_args()
    if args.worker:
        kind, *rest = args.worker
        if kind == "fill":
            out = worker_fill(rest[0], int(rest[1]), int(rest[2]))
        elif kind == "late":
            out = worker_late(rest[0], int(rest[1]))
        else:
            out = worker_pass(rest[0])
        print(json.dumps(out))
        return
    for line in run(args.days, args.per_day, args.code.resolve(), args.late):
        print(line, flush=True)


if __name__ == "__main__":
    main()
