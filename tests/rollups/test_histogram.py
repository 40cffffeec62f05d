import math
import random

import numpy as np
import polars as pl

from service.rollups import histogram
from tests.rollups.helpers import ttft_percentiles


def exact(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def blob(values: list[float]) -> bytes:
    bins = pl.Series(values).to_frame("t").select(histogram.bin_expr(pl.col("t")).alias("t"))["t"]
    uniq, counts = np.unique(bins.to_numpy(), return_counts=True)
    return histogram.encode(uniq.tolist(), counts.tolist())


def test_percentiles_within_one_percent_after_merging_rows() -> None:
    rng = random.Random(5)
    buckets = {
        0: [rng.lognormvariate(5, 1) for _ in range(500)],
        60: [rng.uniform(0.5, 20_000) for _ in range(300)],
    }
    rows = []
    for out, values in buckets.items():
        for part in (values[: len(values) // 3], values[len(values) // 3 :]):  # two rows each
            rows.append({"out": out, "ttft_hit": blob(part), "ttft_miss": None})
    merged = ttft_percentiles(pl.DataFrame(rows), "out")
    for out, values in buckets.items():
        for name, q in (("p50", 0.5), ("p95", 0.95)):
            got = merged[out]["hit"][name]
            assert got is not None
            assert abs(got - exact(values, q)) <= 0.01 * exact(values, q)
    assert "miss" not in merged[0]


def test_zero_and_tiny_latencies() -> None:
    bins, counts = histogram.decode(blob([0.0, 0.0, 0.005]))
    assert histogram.percentile(bins, counts, 0.5) == 0.0
