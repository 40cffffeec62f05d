"""The SHARDS-sampled capacity curve against the exact one (not a test: prints numbers).

1. For each Mooncake trace in shared/traces/mooncake (conversation and synthetic,
   mapped as tests/analytics/conftest.py maps them) and each rate (10%, 1%, 0.1%),
   at test_mooncake.py's capacities: the exact LRU hit rate (`capacity_curve`),
   the sampled one (`sampled_capacity_curve`, "ceiling" anchor) with its stated
   stderr, the absolute error, and the same with the "blocks" anchor; then the
   max absolute error, and the wall time of the exact replay against the sampled
   one in this process (best of --repeat): the frame path with each anchor, and
   the replay of the already-sampled uses alone (what is left in Python when
   ClickHouse ships only the sampled uses).
2. The spread behind one sample: the predicate's sample is one of 1/R disjoint
   bucket ranges [o, o + T) of intHash64(key) % 10000; over the first --windows
   of them (every one at 10%), per capacity: bias, RMSE and max absolute error of
   the estimate, and how often the exact value lies within 2 stated stderr.

    .venv/bin/python bench/capacity_sampled.py [--repeat 3] [--windows 100]
        [--rates 0.1,0.01,0.001]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import polars as pl  # noqa: E402

from service.analytics.capacity import capacity_curve  # noqa: E402
from service.analytics.shards import (  # noqa: E402
    SAMPLE_MODULUS,
    Anchor,
    SampledCapacityResult,
    _block_uses,
    in_sample,
    int_hash64,
    sample_threshold,
    sampled_capacity_curve,
    sampled_curve_from_uses,
)

KI = 1024
TRACES = ROOT.parent / "shared" / "traces" / "mooncake"
#: test_mooncake.py's capacity tests: the trace file and its capacities.
CASES = {
    "conversation": [16 * KI, 64 * KI, 256 * KI, KI * KI, 4 * KI * KI, 16 * KI * KI],
    "synthetic": [3_000_000, 16 * KI * KI],
}
START_US = 1_700_000_000_000_000


def mooncake_frame(path: Path) -> pl.DataFrame:
    """The trace as its README maps it (like tests/analytics/conftest.py)."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return pl.DataFrame(
        {
            "id": range(1, len(rows) + 1),
            "ts_us": [START_US + r["timestamp"] * 1000 for r in rows],
            "model": ["kimi"] * len(rows),
            "prompt_tokens": [r["input_length"] for r in rows],
            "block_size": [512] * len(rows),
            "block_hashes": [np.asarray(r["hash_ids"], "<i8").tobytes() for r in rows],
        }
    )


def best(repeat: int, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float]:
    """fn(*args, **kwargs) and its best wall time of `repeat` runs (the machine may
    be shared)."""
    value, wall = None, float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        value = fn(*args, **kwargs)
        wall = min(wall, time.perf_counter() - t)
    return value, wall


def size_label(tokens: int) -> str:
    for unit, name in ((KI * KI, "Mi"), (KI, "Ki")):
        if tokens % unit == 0:
            return f"{tokens // unit}{name}"
    return f"{tokens:,}"


def pct(rate: float) -> str:
    return f"{rate * 100:g}%"


def part1(name: str, frame: pl.DataFrame, sizes: list[int], args: argparse.Namespace) -> None:
    exact, t_exact = best(args.repeat, capacity_curve, frame, sizes)
    uses = _block_uses(frame, exact_ceiling=True)
    assert uses is not None
    print(
        f"\n== 1. {name}: {len(uses.offsets):,} requests, {len(uses.keys):,} block uses; "
        f"exact replay {t_exact * 1000:.1f} ms (best of {args.repeat}) =="
    )
    for rate in args.rates:
        sampled: dict[Anchor, SampledCapacityResult] = {}
        wall: dict[Anchor, float] = {}
        for anchor in ("ceiling", "blocks"):
            sampled[anchor], wall[anchor] = best(
                args.repeat, sampled_capacity_curve, frame, sizes, rate, anchor=anchor
            )
        keys, tokens, counts, _ = uses.sampled(in_sample(uses.keys, rate))
        _, t_uses = best(
            args.repeat,
            sampled_curve_from_uses,
            keys,
            tokens,
            counts,
            sizes_tokens=sizes,
            rate=rate,
            block_size=uses.block_size,
            prompt_tokens=uses.prompt_tokens,
            ceiling_tokens=uses.ceiling_tokens,
        )
        s = sampled["ceiling"]
        print(
            f"\nrate {pct(s.rate)}: {s.sampled_accesses:,} sampled uses of {s.sampled_keys:,} "
            f"keys; time: 'ceiling' {wall['ceiling'] * 1000:.1f} ms "
            f"({t_exact / wall['ceiling']:.1f}x faster), 'blocks' "
            f"{wall['blocks'] * 1000:.1f} ms ({t_exact / wall['blocks']:.1f}x), replay of the "
            f"sampled uses alone {t_uses * 1000:.1f} ms ({t_exact / t_uses:.0f}x)"
        )
        print(
            f"  {'capacity':>9} {'R*K':>8}  {'exact':>6}  {'sampled':>7} {'stderr':>7} "
            f"{'abs err':>7}  | {'blocks':>6} {'stderr':>7} {'abs err':>7}"
        )
        worst = {"ceiling": 0.0, "blocks": 0.0}
        for i, point in enumerate(exact.points):
            line = f"  {size_label(point.tokens):>9} {s.points[i].sampled_blocks:8.2f}  "
            line += f"{point.hit_rate:6.4f}  "
            for anchor in ("ceiling", "blocks"):
                p = sampled[anchor].points[i]
                assert p.hit_rate is not None and point.hit_rate is not None
                err = abs(p.hit_rate - point.hit_rate)
                worst[anchor] = max(worst[anchor], err)
                width = 7 if anchor == "ceiling" else 6
                line += f"{p.hit_rate:{width}.4f} {p.stderr:7.4f} {err:7.4f}"
                line += "  | " if anchor == "ceiling" else ""
            print(line)
        print(
            f"  max abs error: 'ceiling' {worst['ceiling']:.4f}, 'blocks' {worst['blocks']:.4f}; "
            f"ceiling exact {exact.ceiling:.4f}, 'blocks' estimate "
            f"{sampled['blocks'].ceiling:.4f} +- {sampled['blocks'].ceiling_stderr:.4f}"
        )


def part2(name: str, frame: pl.DataFrame, sizes: list[int], args: argparse.Namespace) -> None:
    exact = np.array([p.hit_rate for p in capacity_curve(frame, sizes).points], dtype=float)
    uses = _block_uses(frame, exact_ceiling=True)
    assert uses is not None
    bucket = (int_hash64(uses.keys) % np.uint64(SAMPLE_MODULUS)).astype(np.int64)
    print(f"\n== 2. {name}: the spread over disjoint samples ==")
    for rate in args.rates:
        t = sample_threshold(rate)
        windows = min(args.windows, SAMPLE_MODULUS // t)
        for anchor in ("ceiling", "blocks"):
            est, se = [], []
            for w in range(windows):
                keys, tokens, counts, _ = uses.sampled((bucket >= w * t) & (bucket < (w + 1) * t))
                got = sampled_curve_from_uses(
                    keys,
                    tokens,
                    counts,
                    sizes_tokens=sizes,
                    rate=rate,
                    block_size=uses.block_size,
                    prompt_tokens=uses.prompt_tokens,
                    ceiling_tokens=uses.ceiling_tokens if anchor == "ceiling" else None,
                    covered_tokens=uses.covered_tokens,
                )
                est.append([p.hit_rate if p.hit_rate is not None else np.nan for p in got.points])
                se.append([p.stderr if p.stderr is not None else np.nan for p in got.points])
            err = np.array(est) - exact
            cover = (np.abs(err) <= 2 * np.array(se)).mean(axis=0)
            print(f"rate {pct(t / SAMPLE_MODULUS)}, '{anchor}' anchor, {windows} samples")
            print("  " + " ".join(f"{size_label(c):>7}" for c in sizes))
            for label, row in (
                ("bias", err.mean(axis=0)),
                ("rmse", np.sqrt((err**2).mean(axis=0))),
                ("max abs", np.abs(err).max(axis=0)),
                ("in 2 se", cover),
            ):
                print(f"  {' '.join(f'{v:7.4f}' for v in row)}  {label}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--windows", type=int, default=100)
    parser.add_argument("--rates", default="0.1,0.01,0.001")
    args = parser.parse_args()
    args.rates = [float(r) for r in args.rates.split(",")]
    found = False
    for name, sizes in CASES.items():
        path = TRACES / f"{name}_trace.jsonl"
        if not path.is_file():
            print(f"!! {path} is not available: skipping {name}")
            continue
        found = True
        frame = mooncake_frame(path)
        part1(name, frame, sizes, args)
        part2(name, frame, sizes, args)
    print(f"\n(load average now {os.getloadavg()[0]:.2f})")
    if not found:
        sys.exit(1)


if __name__ == "__main__":
    main()
