"""Analytics speed and memory (issue 3; not a test: prints numbers).

1. `compute_request_metrics` over N synthetic requests (16 blocks, 24 h, 8 replicas;
   see bench/_synthetic.py): wall, CPU and peak RSS of one full pass, then the
   plain-Python reference against the Polars path on small slices (equal results?).
2. `capacity_curve` on the Mooncake conversation trace against the PyPI tool
   llmtrafficlens (`profile --format mooncake --warmup 0`, in a throwaway venv).
3. `metrics()` (GET /v1/metrics) over D days of minute and hour rollups in a fresh
   migrated SQLite database, with the time split by stage.

Every measure runs in a fresh subprocess (`--worker`), so RSS high-water marks
never mix; the machine may be shared, so repeated measures keep the best.

    .venv/bin/python bench/analytics.py [--requests 1000000] [--slices 2000,5000]
        [--repeat 2] [--days 30] [--parts 1,2,3] [--llmtrafficlens PATH] [--keep]
        [--profile-min 1024] [--profile-ttl 300]

`--profile-min` / `--profile-ttl` give every request of part 1 a caching profile
(contract section 4a: the `below_minimum` and `expiry` causes); without them the
requests have none, as a self-hosted engine's.

`--parts 3` runs only the `/v1/metrics` measures (it generates and computes the
requests it needs without timing them).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

Params = dict[str, Any]
Row = tuple[str, str, str, str]  # measure, figure, goal, verdict
WINDOW_S = 3600.0
KI = 1024
SIZES = [16 * KI, 64 * KI, 256 * KI, KI * KI, 4 * KI * KI, 16 * KI * KI]
TRACE = ROOT.parent / "shared" / "traces" / "mooncake" / "conversation_trace.jsonl"
LTL_DEFAULT = Path("/tmp/ltl/bin/llmtrafficlens")
LTL_VERSION = "0.13.4"  # the version shared/traces/README.md quotes


# --- in the worker processes --------------------------------------------------


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measured(fn: Callable[[], Any]) -> tuple[Any, Params]:
    base, wall, cpu = peak_mib(), time.perf_counter(), time.process_time()
    value = fn()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return value, {"wall_s": wall, "cpu_s": cpu, "base_mib": base, "peak_mib": peak_mib()}


def w_gen(p: Params) -> Params:
    from bench._synthetic import requests

    frame = requests(p["n"])
    frame.write_ipc(p["path"])
    return {"mib": frame.estimated_size() / 2**20}


def w_pass(p: Params) -> Params:
    from service.analytics import RESULT_SCHEMA, compute_request_metrics

    frame = pl.read_ipc(p["path"], n_rows=p.get("n"))  # a slice: only its rows in memory
    frame = with_profile(frame, p.get("profile_min"), p.get("profile_ttl"))
    if p.get("impl") == "reference":
        from tests.analytics.reference import request_metrics

        records = frame.to_dicts()
        for r in records:
            r["block_hashes"] = np.frombuffer(r["block_hashes"], "<i8").tolist()
        out, m = measured(lambda: request_metrics(records, WINDOW_S))
        results = pl.DataFrame(list(out.values()), schema=RESULT_SCHEMA)
    else:
        (results, _), m = measured(lambda: compute_request_metrics(frame, WINDOW_S))
    results.sort("id").write_ipc(p["out"])
    return {**m, "blocks": int(frame["block_hashes"].bin.size().sum()) // 8, "rows": frame.height}


def with_profile(frame: pl.DataFrame, min_prompt: int | None, ttl_s: float | None) -> pl.DataFrame:
    """Every request with one caching profile's columns (contract section 4a), as
    the analytics pass resolves them; none given: the frame as generated."""
    if min_prompt is None and ttl_s is None:
        return frame
    return frame.with_columns(
        pl.lit(min_prompt, pl.Int64).alias("min_prompt_tokens"),
        pl.lit(ttl_s, pl.Float64).alias("ttl_s"),
    )


def mooncake_frame() -> pl.DataFrame:
    """The trace as its README maps it (like tests/analytics/conftest.py)."""
    rows = [json.loads(line) for line in TRACE.read_text().splitlines() if line.strip()]
    return pl.DataFrame(
        {
            "id": range(1, len(rows) + 1),
            "ts_us": [1_700_000_000_000_000 + r["timestamp"] * 1000 for r in rows],
            "model": ["kimi"] * len(rows),
            "prompt_tokens": [r["input_length"] for r in rows],
            "block_size": [512] * len(rows),
            "block_hashes": [np.asarray(r["hash_ids"], "<i8").tobytes() for r in rows],
        }
    )


def w_curve(p: Params) -> Params:
    from service.analytics import capacity_curve

    frame, load = measured(mooncake_frame)
    curve, first = measured(lambda: capacity_curve(frame, SIZES))
    best = min(
        [first["wall_s"]]
        + [measured(lambda: capacity_curve(frame, SIZES))[1]["wall_s"] for _ in range(p["repeat"])]
    )
    points = {pt.tokens: pt.hit_rate for pt in curve.points}
    return {
        "load_s": load["wall_s"],
        "first_s": first["wall_s"],
        "best_s": best,
        "points": points,
        "ceiling": curve.ceiling,
        "peak_mib": peak_mib(),
    }


LTL_API = """import json, sys, time
from llmtrafficlens import adapters, metrics
t = time.perf_counter(); reqs = adapters.read(sys.argv[1], "mooncake", 512, b"")
t1 = time.perf_counter(); metrics.capacity_curve(reqs, 512, json.loads(sys.argv[2]), 0.0)
print(json.dumps({"load_s": t1 - t, "curve_s": time.perf_counter() - t1}))"""


def w_build_db(p: Params) -> Params:
    from sqlalchemy import text

    from bench._synthetic import DAY_US, START_US
    from service import migrate, repository
    from service.db import make_engine, make_sessionmaker
    from service.repository import series as chart_queries
    from service.rollups import aggregate
    from service.services import chart_rollups
    from service.settings import Settings

    records = pl.read_ipc(p["path"])
    results = pl.read_ipc(p["results"])
    joined = aggregate.join_results(records, results)
    engine = make_engine(Settings(database_url=f"sqlite:///{p['db']}", run_jobs=False))
    migrate.upgrade(engine)
    counts: Params = {}
    with make_sessionmaker(engine).begin() as session:
        for grain in (60, 3600):
            sums, ttft = aggregate.rollup_sums(joined, grain), aggregate.ttft_counts(joined, grain)
            repository.insert_rollups(
                session, repository.ROLLUP_TABLE, aggregate.finish(sums, ttft)
            )
            prefix = aggregate.prefix_sums(joined, grain)
            repository.insert_rollups(session, repository.PREFIX_TABLE, prefix)
        # Day 0's chart rollups, as the analytics pass derives them from the above.
        started = time.perf_counter()
        chart_rollups.rebuild_from(session, None)
        chart_s = time.perf_counter() - started
        # Days 1.. are copies of day 0, shifted; each day's v0 -> v1 rollout is one later.
        for table, columns in (
            (repository.ROLLUP_TABLE, repository.ROLLUP_VALUE_COLUMNS),
            (repository.PREFIX_TABLE, repository.PREFIX_VALUE_COLUMNS),
            (chart_queries.CHART_TABLE, chart_queries.CHART_COLUMNS),
        ):
            for day in range(1, p["days"]):
                shift = {
                    "bucket_us": f"bucket_us + {day * DAY_US}",
                    "deploy": f"'v' || (CAST(substr(deploy, 2) AS INTEGER) + {day})",
                }
                exprs = ", ".join(shift.get(c, c) for c in columns)
                session.execute(
                    text(
                        f"INSERT INTO {table.name} ({', '.join(columns)}) SELECT {exprs} "
                        f"FROM {table.name} WHERE bucket_us < {START_US + DAY_US}"
                    )
                )
            for grain in (60, 3600):
                counts[f"{table.name}@{grain}"] = session.scalar(
                    text(f"SELECT count(*) FROM {table.name} WHERE grain_s = {grain}")
                )
        chart_rollups.rebuild_prefix_days(session, None)
        repository.set_cursor(session, chart_rollups.MARKER, chart_rollups.VERSION, 0)
    engine.dispose()
    return {"rows": counts, "db_mib": os.path.getsize(p["db"]) / 2**20, "chart_s": chart_s}


def w_query(p: Params) -> Params:
    from bench._synthetic import DAY_US, START_US
    from service import repository
    from service.db import make_engine, make_sessionmaker
    from service.services import metrics as metrics_mod
    from service.settings import Settings

    stages: dict[str, float] = {}
    rows: dict[str, int] = {}

    def timed(module: Any, name: str) -> None:
        original = getattr(module, name, None)
        if original is None:  # a stage the current code does not have
            return

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            out = original(*args, **kwargs)
            stages[name] = stages.get(name, 0.0) + time.perf_counter() - started
            if isinstance(out, pl.DataFrame):
                rows[name] = rows.get(name, 0) + out.height
            return out

        setattr(module, name, wrapper)

    timed(repository, "fetch_rollups")
    timed(repository, "fetch_prefix_keys")
    series_mod = getattr(metrics_mod, "series_path", None)  # the chart-rollup read path
    if series_mod is not None:
        timed(series_mod.series_repo, "chart_extent")
        timed(series_mod.series_repo, "fetch_series_rows")
        timed(series_mod, "summarize")
        timed(series_mod, "single_row_buckets")
        timed(series_mod, "_totals")
    query = metrics_mod.MetricsQuery(
        p["service"], p["model"], START_US, START_US + p["days"] * DAY_US, p["bucket_s"]
    )
    factory = make_sessionmaker(make_engine(Settings(database_url=f"sqlite:///{p['db']}")))
    answer: Params = {}

    def run() -> tuple[float, dict[str, float]]:
        stages.clear()
        rows.clear()
        with factory() as session:
            started, cpu = time.perf_counter(), time.process_time()
            answer.update(metrics_mod.metrics(session, query))
            stages["cpu"] = time.process_time() - cpu
            return time.perf_counter() - started, dict(stages)

    grain = (
        metrics_mod.rollup_grain(query)
        if hasattr(metrics_mod, "rollup_grain")
        else "+".join(str(g) for g in grains_read(series_mod, factory, query))
    )
    runs = [run()]
    runs += [run() for _ in range(p["repeat"] if runs[0][0] < 2 else 0)]  # slow: run once
    best, split = min(runs, key=lambda r: r[0])
    cpu = split.pop("cpu")
    split["rest"] = best - sum(split.values())
    split["(process cpu)"] = cpu
    return {
        "first_s": runs[0][0],
        "best_s": best,
        "split": split,
        "rows": rows,
        "grain": grain,
        "buckets": len(answer["buckets"]),
        "peak_mib": peak_mib(),
    }


def grains_read(series_mod: Any, factory: Any, query: Any) -> tuple[int, ...]:
    with factory() as session:
        q = series_mod.SeriesQuery(
            query.service, query.model, query.from_us, query.to_us, query.bucket_s
        )
        return tuple(series_mod.series(session, q).grains_s)


# --- in the parent ------------------------------------------------------------


def worker(name: str, **params: Any) -> Params:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", name, json.dumps(params)]
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"worker {name} failed:\n{done.stderr[-4000:]}")
    return {
        **json.loads(done.stdout.strip().splitlines()[-1]),
        "process_s": time.perf_counter() - started,
    }


def row(name: str, figure: str, goal: str, ok: bool | None) -> Row:
    return name, figure, goal, "" if ok is None else "ok" if ok else "MISSED"


def part1(args: argparse.Namespace, wd: Path) -> list[Row]:
    data, results = wd / "requests.arrow", wd / "results.arrow"
    print(f"\n== 1. compute_request_metrics, {args.requests:,} synthetic requests ==")
    print(f"generated: {worker('gen', n=args.requests, path=str(data))['mib']:.0f} MiB frame")
    profile = {"profile_min": args.profile_min, "profile_ttl": args.profile_ttl}
    if args.profile_min is not None or args.profile_ttl is not None:
        print(f"caching profile on every request: min {args.profile_min}, ttl {args.profile_ttl} s")
    runs = [worker("pass", path=str(data), out=str(results), **profile) for _ in range(args.repeat)]
    for r in runs:
        print(
            f"full pass: {r['rows']:,} requests, {r['blocks']:,} blocks: wall {r['wall_s']:.2f}"
            f" s, cpu {r['cpu_s']:.2f} s, peak RSS {r['peak_mib']:.0f} MiB (input loaded: "
            f"{r['base_mib']:.0f} MiB)"
        )
    seen, rewarms, rewrites = (
        pl.read_ipc(results)
        .select(pl.mean("seen_blocks"), pl.sum("is_rewarm"), pl.sum("history_rewrite"))
        .row(0)
    )
    print(f"  mean seen blocks {seen:.2f}, rewarms {rewarms:,}, history rewrites {rewrites:,}")
    causes = pl.read_ipc(results)["rewarm_cause"].drop_nulls().value_counts(sort=True).rows()
    print("  rewarms by cause: " + ", ".join(f"{c} {k:,}" for c, k in causes))
    wall, peak = min(r["wall_s"] for r in runs), max(r["peak_mib"] for r in runs)
    n_req = f"{args.requests / 1e6:g}M"
    out = [
        row(f"pass {n_req} requests: wall (best)", f"{wall:.2f} s", "<= 20 s", wall <= 20),
        row(f"pass {n_req} requests: peak RSS", f"{peak:.0f} MiB", "<= 2048 MiB", peak <= 2048),
    ]
    for n in args.slices:
        ref = worker(
            "pass", path=str(data), n=n, impl="reference", out=str(wd / "ref.arrow"), **profile
        )
        fast = worker("pass", path=str(data), n=n, out=str(wd / "fast.arrow"), **profile)
        a, b = pl.read_ipc(wd / "ref.arrow"), pl.read_ipc(wd / "fast.arrow")
        bad = [c for c in a.columns if not a[c].equals(b[c])]
        ratio = ref["wall_s"] / fast["wall_s"]
        print(
            f"slice {n:,}: reference {ref['wall_s']:.2f} s (peak {ref['peak_mib']:.0f} MiB), "
            f"polars {fast['wall_s']:.3f} s (peak {fast['peak_mib']:.0f} MiB): {ratio:.0f}x; "
            f"results equal: {not bad}{' (differ: ' + ', '.join(bad) + ')' if bad else ''}"
        )
        out.append(row(f"slice {n:,}: reference / polars", f"{ratio:.0f}x", "equal", not bad))
    return out


def find_ltl(given: str | None) -> Path | None:
    exe = Path(given) if given else LTL_DEFAULT
    if not exe.exists() and not given:
        venv = exe.parent.parent
        print(f"installing llmtrafficlens=={LTL_VERSION} into {venv} ...")
        for cmd in (
            [shutil.which("python3") or "python3", "-m", "venv", str(venv)],
            [str(venv / "bin" / "pip"), "install", "-q", f"llmtrafficlens=={LTL_VERSION}"],
        ):
            done = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                print(
                    f"!! llmtrafficlens cannot be installed ({' '.join(cmd[:3])}): "
                    f"{str(done.stderr).strip()[-500:]}\n!! skipping the comparison"
                )
                return None
    if not exe.exists():
        print(f"!! llmtrafficlens not found at {exe}: skipping the comparison")
        return None
    return exe


Curve = dict[int | None, str]


def run_ltl(exe: Path, wd: Path) -> tuple[float, Curve, Curve]:
    """Wall time of the CLI, its printed percentages and its JSON report's 4 decimals."""
    flags = ["profile", "--format", "mooncake", "--warmup", "0", "-o", str(wd / "ltl")]
    cmd = [str(exe), *flags, str(TRACE)]
    started = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=wd).stdout
    wall = time.perf_counter() - started
    printed: Curve = {None: re.findall(r"unbounded\s+([\d.]+)%", out)[0]}
    for num, unit, pct in re.findall(r"^\s*(\d+)([KM]) tokens\s+([\d.]+)%", out, re.M):
        printed[int(num) * (KI if unit == "K" else KI * KI)] = pct
    curve = json.loads((wd / "ltl.json").read_text())["reuse_potential"]["curve"]
    return wall, printed, {c["capacity_tokens"]: f"{c['hit_rate']:.4f}" for c in curve}


def part2(args: argparse.Namespace, wd: Path) -> list[Row]:
    print("\n== 2. capacity_curve on the Mooncake conversation trace vs llmtrafficlens ==")
    exe = find_ltl(args.llmtrafficlens)
    cli: list[tuple[float, Curve, Curve]] = []
    ours_process: list[float] = []
    for _ in range(args.repeat):  # interleaved, so both see the same machine load
        cli += [run_ltl(exe, wd)] if exe else []
        ours_process.append(worker("curve", repeat=0)["process_s"])
    ours = worker("curve", repeat=5)
    curve: Curve = {int(k): f"{v:.4f}" for k, v in ours["points"].items()}
    curve[None] = f"{ours['ceiling']:.4f}"

    def show(c: Curve) -> str:
        return " / ".join(c[s] for s in SIZES) + f", unbounded {c[None]}"

    print(
        f"cachewatch capacity_curve: {ours['best_s'] * 1000:.0f} ms best of 6 (first "
        f"{ours['first_s'] * 1000:.0f} ms; loading the JSONL {ours['load_s']:.2f} s); whole "
        f"process (start, load, one curve) best {min(ours_process):.2f} s\n  {show(curve)}"
    )
    if not exe:
        return [row("curve vs llmtrafficlens", "not run", ">= 5x", False)]
    api = subprocess.run(
        [str(exe.parent / "python"), "-c", LTL_API, str(TRACE), json.dumps(SIZES)],
        capture_output=True,
        text=True,
        check=True,
    )
    ltl = json.loads(api.stdout)
    wall, printed, precise = min(cli, key=lambda r: r[0])
    print(
        f"llmtrafficlens {LTL_VERSION} CLI: best {wall:.2f} s of {len(cli)}; its "
        f"capacity_curve() alone {ltl['curve_s']:.2f} s (loading {ltl['load_s']:.2f} s)\n"
        f"  printed: {show(printed)} (%)\n  json:    {show(precise)}"
    )
    mine = {s: f"{100 * float(v):.1f}" for s, v in curve.items()}
    equal = mine == printed
    x_cli, x_api = wall / ours["best_s"], ltl["curve_s"] / ours["best_s"]
    x_process = wall / min(ours_process)
    print(
        f"ratio: CLI / capacity_curve {x_cli:.0f}x; curve() / capacity_curve {x_api:.0f}x; "
        f"process / process {x_process:.1f}x; equal at the printed 0.1%: {equal}"
    )
    return [
        row("curve: ltl CLI / capacity_curve", f"{x_cli:.0f}x", ">= 5x", x_cli >= 5),
        row("curve: ltl curve() / capacity_curve", f"{x_api:.0f}x", ">= 5x", x_api >= 5),
        row("curve: ltl CLI / our whole process", f"{x_process:.1f}x", "(context)", None),
        row("curve: numbers at printed precision", "equal" if equal else "DIFFER", "equal", equal),
    ]


def part3(args: argparse.Namespace, wd: Path) -> list[Row]:
    print(f"\n== 3. metrics() over {args.days} days of rollups (SQLite) ==")
    data, results, db = wd / "requests.arrow", wd / "results.arrow", wd / "metrics.db"
    if not results.exists():  # --parts 3 alone: generate and compute part 1's data quietly
        worker("gen", n=args.requests, path=str(data))
        worker("pass", path=str(data), out=str(results))
    built = worker("build_db", path=str(data), results=str(results), db=str(db), days=args.days)
    print(
        f"built in {built['process_s']:.0f} s (day 0's chart rollups derived in "
        f"{built['chart_s']:.1f} s): {built['db_mib']:.0f} MiB; rows: "
        + ", ".join(f"{k} {v:,}" for k, v in built["rows"].items())
    )
    out: list[Row] = []
    for bucket in (3600, 86_400, 300):
        for service, model in ((None, None), (None, "model-a"), ("svc-0", "model-a")):
            q = {"bucket_s": bucket, "service": service, "model": model}
            r = worker("query", db=str(db), days=args.days, repeat=args.repeat, **q)
            ms, rows = r["best_s"] * 1000, r["rows"]
            split = ", ".join(f"{k} {v * 1000:.0f}" for k, v in r["split"].items())
            label = f"metrics {bucket} s, {service or '*'}, {model or '*'}"
            print(
                f"{label}: {ms:.0f} ms best (first {r['first_s'] * 1000:.0f} ms); {r['grain']} s"
                f" rollups: {rows.get('fetch_rollups', rows.get('fetch_series_rows', 0)):,} rows"
                f" + prefix {rows.get('fetch_prefix_keys', 0):,}; {r['buckets']} buckets; peak RSS "
                f"{r['peak_mib']:.0f} MiB\n    ms: {split}"
            )
            out.append(row(label, f"{ms:.0f} ms", "<= 200 ms", ms <= 200))
    return out


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        print(json.dumps(globals()[f"w_{sys.argv[2]}"](json.loads(sys.argv[3]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1_000_000)
    parser.add_argument(
        "--slices", type=lambda s: [int(x) for x in s.split(",") if x], default=[2000, 5000]
    )
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--parts", default="1,2,3")
    parser.add_argument("--llmtrafficlens", help="the llmtrafficlens executable to compare with")
    parser.add_argument("--keep", action="store_true", help="keep the work folder")
    parser.add_argument(
        "--profile-min",
        type=int,
        help="part 1: give every request this min_prompt_tokens (a caching profile, e.g. 1024)",
    )
    parser.add_argument(
        "--profile-ttl", type=float, help="part 1: give every request this ttl_s (e.g. 300)"
    )
    args = parser.parse_args()
    wd = Path(tempfile.mkdtemp(prefix="cw-bench-analytics-"))
    print(
        f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on "
        f"{os.cpu_count()} cores; polars {pl.__version__}; work folder {wd}"
    )
    rows: list[Row] = []
    parts = {"1": part1, "2": part2, "3": part3}
    try:
        for key in args.parts.split(","):
            rows += parts[key](args, wd)
    finally:
        if not args.keep:
            shutil.rmtree(wd, ignore_errors=True)
    print(f"\n== summary (load average now {os.getloadavg()[0]:.2f}) ==")
    width = max(len(r[0]) for r in rows)
    for name, figure, goal, mark in rows:
        print(f"{name:<{width}}  {figure:>10}  {goal:<14} {mark}")


if __name__ == "__main__":
    main()
