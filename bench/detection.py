"""Detection quality and speed (not a test; prints numbers).

1. The simulated-week family over N seeds (timings, rates and magnitudes vary by
   seed; the prefix problem rotates through a timestamp at the top of the system
   prompt, a shuffled tools list and history rewrites): precision, recall,
   attribution accuracy and cause accuracy of `cachewatch detect`.
2. Speed: change-point detection over 100 series of 30 days in 5-minute buckets.
3. Groups (issue 19): the same 100 series, each with its 10 scenarios and 20 busiest
   tenants (shares from 30% down to 0.2% of the service's tokens, each following its
   service's level, noisier the smaller it is; one group in ten services breaks on
   its own): the detection pass over the series alone, then with its groups
   (`service.detection.groups.group_drops`: the residual test, the search of the
   groups that moved apart, the service's explanation), same run. Goal: at most 3
   times as long; it prints the groups searched and the unexplained drops found
   against those planted.

    .venv/bin/python bench/detection.py --seeds 20 [--jobs 2] [--speed-only]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PROBLEMS = ("dynamic_system_prefix", "shuffled_tools", "history_rewrite")


def run_seed(seed: int) -> tuple[int, dict[str, object]]:
    from service import migrate
    from service.db import make_engine, make_sessionmaker
    from service.services.detection import detect
    from service.services.regressions import regression_to_json
    from service.settings import Settings
    from service.simulate import detection_week, simulate
    from service.simulate.scoring import score
    from tests.simulated import load_records

    week = detection_week(seed, prefix_problem=PROBLEMS[seed % len(PROBLEMS)])  # type: ignore[arg-type]
    result = simulate(week.scenario, seed)
    with tempfile.TemporaryDirectory() as folder:
        settings = Settings(database_url=f"sqlite:///{folder}/bench.db", run_jobs=False)
        engine = make_engine(settings)
        migrate.upgrade(engine)
        factory = make_sessionmaker(engine)
        with factory.begin() as session:
            load_records(session, result.records, result.events)
        started = time.perf_counter()
        with factory.begin() as session:
            found = [regression_to_json(r) for r in detect(session, settings).created]
        seconds = time.perf_counter() - started
        engine.dispose()
    outcome = score(found, week.regressions)
    return seed, {
        "score": outcome,
        "records": len(result.records),
        "detect_s": seconds,
        "problem": PROBLEMS[seed % len(PROBLEMS)],
    }


def quality(seeds: int, jobs: int, first: int = 0) -> None:
    from service.simulate.scoring import Score

    total = Score()
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        # in seed order, as they finish
        for seed, row in pool.map(run_seed, range(first, first + seeds)):
            outcome: Score = row["score"]  # type: ignore[assignment]
            total.add(outcome)
            print(
                f"seed {seed:2d} {row['problem']:<22} {row['records']:>7,} records "
                f"detect {row['detect_s']:5.1f} s  found {outcome.found} expected "
                f"{outcome.expected} matched {outcome.matched} attributed {outcome.attributed} "
                f"caused {outcome.caused}",
                flush=True,
            )
            for line in outcome.misses + outcome.extras + outcome.wrong:
                print(f"    {line}", flush=True)
    matched = max(total.matched, 1)
    print(
        f"\n{seeds} seeds: precision {total.precision:.3f}  recall {total.recall:.3f}  "
        f"attribution {total.attributed / matched:.3f}  cause {total.caused / matched:.3f}  "
        "(goal: each >= 0.95)"
    )


def speed() -> None:
    from service.detection.changepoints import DropRule, lasting_drops

    rng = np.random.default_rng(0)
    n = 30 * 288
    t = np.arange(n)
    series = []
    for _ in range(100):
        w = np.where((t % 288) < 80, 0.08, 1.0) * rng.uniform(0.7, 1.3, n) * 1e5
        y = np.clip(0.7 + rng.normal(0, 0.03 / np.sqrt(w / 1e5)), 0, 1)
        at = int(rng.integers(1000, n - 1000))
        y[at:] -= rng.uniform(0.0, 0.4)
        series.append((y, w))
    started = time.perf_counter()
    found = sum(len(lasting_drops(y, w, DropRule())) for y, w in series)
    seconds = time.perf_counter() - started
    print(
        f"change points: 100 series x 30 days of 5-minute buckets ({n} each): {seconds:.2f} s "
        f"({found} drops found; goal <= 10 s)"
    )


def _series(y: np.ndarray, w: np.ndarray, bucket_us: int) -> Any:
    from service.analytics.definitions import SUM_COLUMNS
    from service.detection.series import Series

    n = len(y)
    tokens = np.maximum(w, 1).astype(np.int64)
    sums = {c: np.zeros(n, np.int64) for c in SUM_COLUMNS}
    sums["prompt_tokens"], sums["cached_tokens"] = tokens, (y * tokens).astype(np.int64)
    sums["requests"] = np.maximum(tokens // 2000, 1)  # 2,000-token requests
    zeros = np.zeros(n, np.int64)
    return Series(np.arange(n, dtype=np.int64) * bucket_us, sums, zeros, zeros)


SCENARIO_SHARES = [0.3, 0.2, 0.1, 0.1, 0.1, 0.05, 0.05, 0.04, 0.03, 0.03]


def groups_speed(services: int = 100) -> None:
    from service.detection.changepoints import DropRule, lasting_drops
    from service.detection.groups import change_us, group_drops

    rng = np.random.default_rng(1)
    n, bucket_us = 30 * 288, 300 * 1_000_000
    t = np.arange(n)
    day = np.where((t % 288) < 80, 0.08, 1.0)
    built = []
    for s in range(services):
        level = np.full(n, 0.7)
        level[int(rng.integers(1000, n - 1000)) :] -= rng.uniform(0.0, 0.4)

        def noisy(share: float, lv: np.ndarray = level) -> Any:
            w = day * rng.uniform(0.7, 1.3, n) * 1e5 * share
            y = np.clip(lv + rng.normal(0, 0.03 / np.sqrt(w / 1e5)), 0, 1)
            return _series(y, w, bucket_us)

        shares = SCENARIO_SHARES + list(np.geomspace(0.05, 0.002, 20))
        groups = {i: noisy(share) for i, share in enumerate(shares)}
        if s % 10 == 0:  # one group of ten services breaks on its own
            broken = level.copy()
            broken[int(rng.integers(1000, n - 1000)) :] -= 0.5
            groups[5] = noisy(shares[5], broken)
        built.append((noisy(1.0), groups))
    rule = DropRule()
    started = time.perf_counter()
    for service, _ in built:
        lasting_drops(service.hit_rate, service.weight, rule)
    alone = time.perf_counter() - started
    started, found = time.perf_counter(), 0
    for service, groups in built:
        drops = lasting_drops(service.hit_rate, service.weight, rule)
        spans = [change_us(service, d) for d in drops]
        found += sum(
            len(v) for v in group_drops(service, spans, groups, rule, 3 * bucket_us).values()
        )
    with_groups = time.perf_counter() - started
    print(
        f"groups: the series alone with ruptures' own Binseg (the search before issue 19): "
        f"{_with_plain_binseg(built, rule):.2f} s"
    )
    print(
        f"groups: {services} series x 30 days, each with 10 scenarios and 20 tenants: "
        f"alone {alone:.2f} s, with groups {with_groups:.2f} s, ratio {with_groups / alone:.1f} "
        f"(goal <= 3); unexplained group drops found {found} "
        f"(planted {len(range(0, services, 10))})"
    )


def _with_plain_binseg(built: list[Any], rule: Any) -> float:
    """The series alone, searched by ruptures' own `Binseg` (same change points)."""
    import ruptures as rpt

    from service.detection import changepoints

    vector = changepoints.VectorBinseg
    changepoints.VectorBinseg = rpt.Binseg  # type: ignore[misc]
    try:
        started = time.perf_counter()
        for service, _ in built:
            changepoints.lasting_drops(service.hit_rate, service.weight, rule)
        return time.perf_counter() - started
    finally:
        changepoints.VectorBinseg = vector  # type: ignore[misc]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--first", type=int, default=0, help="the first seed (to split a run)")
    parser.add_argument("--speed-only", action="store_true")
    args = parser.parse_args()
    speed()
    groups_speed()
    if not args.speed_only:
        quality(args.seeds, args.jobs, args.first)


if __name__ == "__main__":
    main()
