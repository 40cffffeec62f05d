"""The analytics pass in steps against one transaction (issue 32; not a test: prints
numbers): what the step sizes cost, and how long the longest step holds the lock.

* dense: `card_tenants`' records (default 200,000 in order over 3 hours, 1 tenant),
  caught up with steps of `--records` records each (the minute budget out of the way);
* sparse: `card_late`'s records (default 300 days x 50 in each day's first hour),
  with steps of `--minutes` rollup minutes each (the record budget out of the way).

Each row is a fresh SQLite database, filled then caught up the way the worker does
(a transaction a step); the first row of each part is one transaction
(`catch_up`), and the ratios are against it.

    .venv/bin/python bench/card_steps.py [--dense 200000] [--days 300]
        [--records 200000,100000,50000,25000,10000] [--minutes 300,1500,3000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import card_late
import card_tenants


def _caught_up(
    settings: Any, engine: Any, update: dict[str, int] | None
) -> tuple[float, int, float]:
    """Total seconds, steps and the longest step; `update` None: one `catch_up`."""
    from service.db import make_sessionmaker
    from service.services import analytics_pass

    factory = make_sessionmaker(engine)
    started, steps, longest, more = time.perf_counter(), 0, 0.0, True
    while more:
        began = time.perf_counter()
        with factory.begin() as session:
            if update is None:
                analytics_pass.catch_up(session, settings)
                more = False
            else:
                more = analytics_pass.catch_up_step(
                    session, settings.model_copy(update=update)
                ).more
        steps, longest = steps + 1, max(longest, time.perf_counter() - began)
    return time.perf_counter() - started, steps, longest


def _part(label: str, fill: Any, updates: list[tuple[str, dict[str, int] | None]]) -> list[str]:
    lines, first = (
        [label, f"  {'steps of':<22} {'total s':>8} {'x':>6} {'steps':>6} {'longest s':>10}"],
        0.0,
    )
    for name, update in updates:
        with tempfile.TemporaryDirectory(prefix="cw-card-steps-") as tmp:
            settings, engine = fill(f"sqlite:///{tmp}/steps.db")
            total, steps, longest = _caught_up(settings, engine, update)
            engine.dispose()
        first = first or total
        lines.append(
            f"  {name:<22} {total:>8.2f} {total / first:>5.2f}x {steps:>6} {longest:>10.2f}"
        )
    return lines


def run(
    dense: int = 200_000,
    days: int = 300,
    records: tuple[int, ...] = (200_000, 100_000, 50_000, 25_000, 10_000),
    minutes: tuple[int, ...] = (300, 1_500, 3_000),
) -> list[str]:
    def dense_fill(url: str) -> tuple[Any, Any]:
        settings, engine = card_tenants._engine(url)
        card_tenants._insert(engine, card_tenants._records(dense, 1, 0))
        return settings, engine

    def sparse_fill(url: str) -> tuple[Any, Any]:
        card_late.worker_fill(url, days, 50)
        return card_late._engine(url)

    no_minute_cut = 10**9
    lines = [f"the pass in steps (SQLite, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f})"]
    lines += _part(
        f"dense: {dense:,} records in order over {card_tenants.SPAN_H} h",
        dense_fill,
        [("one transaction", None)]
        + [
            (
                f"{n:,} records",
                {"analytics_step_records": n, "analytics_step_minutes": no_minute_cut},
            )
            for n in records
        ],
    )
    lines += _part(
        f"sparse: {days * 50:,} records on {days} days",
        sparse_fill,
        [("one transaction", None)]
        + [
            (f"{m:,} minutes", {"analytics_step_records": 10**9, "analytics_step_minutes": m})
            for m in minutes
        ],
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--dense", type=int, default=200_000)
    parser.add_argument("--days", type=int, default=300)
    parser.add_argument("--records", default="200000,100000,50000,25000,10000")
    parser.add_argument("--minutes", default="300,1500,3000")
    args = parser.parse_args()
    for line in run(
        args.dense,
        args.days,
        tuple(int(x) for x in args.records.split(",")),
        tuple(int(x) for x in args.minutes.split(",")),
    ):
        print(line, flush=True)


if __name__ == "__main__":
    main()
