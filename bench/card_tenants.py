"""The analytics pass under many distinct group values and segment names (issue 32;
not a test: prints numbers).

1. The same N records (default 100,000: bench/_synthetic.py's requests squeezed into
   3 hours) with 1, 1k, 10k and 100k distinct tenants and as many scenarios: the
   first `catch_up` over them on a fresh SQLite database, its wall time and peak RSS,
   and both as ratios of the 1-tenant row (goal: time <= 3x, RSS <= 1.5x).
2. The same records with 100k distinct static segment names (goal: bounded like
   the per-segment variant cap, so near the 1-name row).
3. Passes of 5,000 records each bringing 5,000 new tenants and scenarios, all within
   one hour (the open hour): the time of the 1st and the last pass (goal: flat), and
   the same records of one tenant beside it (what the hour's records cost alone).

Each database is filled by one subprocess and caught up by another, so the pass's
peak RSS is its own (`ru_maxrss` of a process that did only that, imports
included). `--code DIR` runs another checkout's service code (e.g. a worktree of the
commit before), with this bench.

    .venv/bin/python bench/card_tenants.py [--records 100000] [--tenants 1,1000,10000,100000]
        [--passes 10] [--span-h 3] [--code DIR] [--database-url URL]

`--database-url` (PostgreSQL) runs every case on that server instead, each in a
fresh database created next to the one named.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _workers import drop_database, fresh_database, run_worker  # the bench folder: the script's own

ROOT = Path(__file__).resolve().parent.parent
HOUR_US = 3600 * 1_000_000
SPAN_H = 3
NEW_PER_PASS = 5_000
#: Each record's static start: a tools block, then a system prompt named per case.
TOOLS = {"name": "tools", "hash": "tools-v1", "tokens": 1200, "norm_hash": "n-tools"}


# --- in the worker processes --------------------------------------------------


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _records(n: int, tenants: int, names: int, span_h: int = SPAN_H) -> list[dict[str, Any]]:
    """Rows of `usage_records` for n synthetic requests over `span_h` hours from the
    synthetic start, the i-th with tenant and scenario number i % tenants, and,
    with `names`, a static segment named after i % names."""
    sys.path.insert(0, str(ROOT / "bench"))
    from _synthetic import START_US, requests  # type: ignore[import-not-found]

    from service import repository

    frame = requests(n).drop("id")
    span = span_h * HOUR_US
    # Squeezed into the span: (ts - start) * span overflows int64, so divide first.
    frame = frame.with_columns((frame["ts_us"] - START_US) // (24 * HOUR_US // span) + START_US)
    empty = {c: None for c in repository.USAGE_COLUMNS} | {"cache_write_tokens": 0}
    rows = []
    for i, r in enumerate(frame.to_dicts()):
        k = i % tenants
        row = {**empty, **r, "request_id": f"r{i}", "received_us": r["ts_us"]}
        row |= {"tenant": f"tenant-{k}", "scenario": f"scenario-{k}"}
        if names:
            system = {"name": f"system-{i % names}", "hash": "s1", "tokens": 800}
            message = {"name": "message[0]", "hash": f"m{i}", "tokens": 40}
            row["segments"] = [TOOLS, system, message]
        rows.append(row)
    return rows


def _engine(url: str) -> Any:
    from service import migrate
    from service.db import make_engine
    from service.settings import Settings

    settings = Settings(database_url=url, run_jobs=False, reuse_window_s=3600.0)
    engine = make_engine(settings)
    migrate.upgrade(engine)
    return settings, engine


def _insert(engine: Any, rows: list[dict[str, Any]]) -> None:
    from service import repository

    for start in range(0, len(rows), 20_000):
        with engine.begin() as conn:
            conn.execute(repository.USAGE_TABLE.insert(), rows[start : start + 20_000])


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _catch_up(settings: Any, engine: Any) -> tuple[float, float, int]:
    """One `catch_up` in its own transaction: wall and CPU seconds, records read."""
    from service.db import make_sessionmaker
    from service.services import analytics_pass

    started, cpu = time.perf_counter(), _cpu_s()
    with make_sessionmaker(engine).begin() as session:
        report = analytics_pass.catch_up(session, settings)
    return time.perf_counter() - started, _cpu_s() - cpu, report.records


def worker_fill(url: str, n: int, tenants: int, names: int, span_h: int) -> dict[str, Any]:
    _, engine = _engine(url)
    _insert(engine, _records(n, tenants, names, span_h))
    engine.dispose()
    return {}


def worker_pass(url: str) -> dict[str, Any]:
    settings, engine = _engine(url)
    took, cpu, records = _catch_up(settings, engine)
    engine.dispose()
    return {"pass_s": took, "cpu_s": cpu, "records": records, "peak_mib": _peak_mib()}


def worker_stream(url: str, passes: int, tenants: int) -> dict[str, Any]:
    """`passes` passes, each over NEW_PER_PASS records (of as many new tenants when
    `tenants` is their number, of one when it is 1), all in the synthetic start's
    hour (the passes' records follow each other in time)."""
    settings, engine = _engine(url)
    rows = _records(passes * NEW_PER_PASS, tenants, 0)
    hour = rows[0]["ts_us"] // HOUR_US * HOUR_US
    step = HOUR_US // (passes * NEW_PER_PASS)
    out = []
    for p in range(passes):
        part = rows[p * NEW_PER_PASS : (p + 1) * NEW_PER_PASS]
        for i, row in enumerate(part):
            row["ts_us"] = row["received_us"] = hour + (p * NEW_PER_PASS + i) * step
        _insert(engine, part)
        took, cpu, _ = _catch_up(settings, engine)
        out.append({"pass_s": took, "cpu_s": cpu, "rss_mib": _rss_mib()})
    engine.dispose()
    return {"passes": out, "peak_mib": _peak_mib()}


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


# --- in the parent ------------------------------------------------------------


def _worker(code: Path, *args: str) -> dict[str, Any]:
    return run_worker(__file__, code, *args)


def _case(
    code: Path, base: str | None, tmp: Path, n: int, tenants: int, names: int, span_h: int
) -> Any:
    url = fresh_database(base, tmp, f"t{tenants}n{names}")
    try:
        _worker(code, "fill", url, str(n), str(tenants), str(names), str(span_h))
        return _worker(code, "pass", url)
    finally:
        drop_database(base, url)


def run(
    records: int = 100_000,
    tenants: tuple[int, ...] = (1, 1_000, 10_000, 100_000),
    names: int = 100_000,
    passes: int = 10,
    code: Path = ROOT,
    database_url: str | None = None,
    span_h: int = SPAN_H,
) -> list[str]:
    """The lines to print: the cases of the module docstring, one subprocess each."""
    backend = "SQLite" if database_url is None else "PostgreSQL"
    lines = [
        f"group and segment cardinality ({backend}, {os.cpu_count()} CPUs, load "
        f"{os.getloadavg()[0]:.2f}; code {code}): {records:,} records over {span_h} h",
        "(wall time varies with the machine's load; CPU time, all threads, less so)",
        f"{'case':<44} {'pass s':>7} {'x':>6} {'CPU s':>7} {'x':>6} {'peak RSS':>10} {'x':>6}",
    ]
    with tempfile.TemporaryDirectory(prefix="cachewatch-card-") as tmp_name:
        tmp = Path(tmp_name)
        first: dict[str, Any] | None = None
        cases = [(t, 0) for t in tenants] + ([(1, names)] if names else [])
        for t, m in cases:
            out = _case(code, database_url, tmp, records, t, m, span_h)
            first = first or out
            label = f"{t:,} tenants and scenarios" + (f", {m:,} segment names" if m else "")
            lines.append(
                f"{label:<44} {out['pass_s']:>7.2f} {out['pass_s'] / first['pass_s']:>5.1f}x "
                f"{out['cpu_s']:>7.2f} {out['cpu_s'] / first['cpu_s']:>5.1f}x "
                f"{out['peak_mib']:>6,.0f} MiB {out['peak_mib'] / first['peak_mib']:>5.2f}x"
            )
        if passes:
            lines += _streams(code, database_url, tmp, passes)
    return lines


def _streams(code: Path, database_url: str | None, tmp: Path, passes: int) -> list[str]:
    """The passes of new tenants, and of one tenant as the control: what the open
    hour's records cost by themselves (the reuse state holds the window's blocks)."""
    lines = []
    for label, tenants in (("new tenants", passes * NEW_PER_PASS), ("one tenant", 1)):
        url = fresh_database(database_url, tmp, f"stream{tenants}")
        try:
            each = _worker(code, "stream", url, str(passes), str(tenants))["passes"]
        finally:
            drop_database(database_url, url)
        lines.append(
            f"+{NEW_PER_PASS:,} records per pass ({label}), {passes} passes in one hour: "
            f"pass 1 {each[0]['pass_s']:.2f} s ({each[0]['cpu_s']:.2f} s CPU), pass "
            f"{passes} {each[-1]['pass_s']:.2f} s ({each[-1]['cpu_s']:.2f} s CPU): "
            f"{each[-1]['pass_s'] / each[0]['pass_s']:.1f}x; RSS after pass 1 "
            f"{each[0]['rss_mib']:,.0f} MiB, after pass {passes} {each[-1]['rss_mib']:,.0f} MiB"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--tenants", default="1,1000,10000,100000")
    parser.add_argument("--names", type=int, default=100_000, help="0: no segment-name case")
    parser.add_argument("--passes", type=int, default=10, help="0: no per-pass series")
    parser.add_argument("--code", type=Path, default=ROOT)
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--span-h", type=int, default=SPAN_H, help="hours the records span")
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        sys.path.insert(0, str(args.code.resolve()))
        kind, url, *rest = args.worker
        if kind == "fill":
            out = worker_fill(url, *(int(x) for x in rest))
        elif kind == "pass":
            out = worker_pass(url)
        else:
            out = worker_stream(url, int(rest[0]), int(rest[1]))
        print(json.dumps(out))
        return
    tenants = tuple(int(t) for t in args.tenants.split(",") if t)
    for line in run(
        args.records,
        tenants,
        args.names,
        args.passes,
        args.code.resolve(),
        args.database_url,
        args.span_h,
    ):
        print(line, flush=True)


if __name__ == "__main__":
    main()
