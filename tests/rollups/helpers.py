"""Shared by the rollup tests: the TTFT percentiles of plain rollup rows, merged per
group with the service's own histogram code, as a reference for the chart rows."""

import numpy as np
import polars as pl

from service.rollups import histogram


def ttft_percentiles(rows: pl.DataFrame, by: str) -> dict[int, dict[str, dict[str, float | None]]]:
    """p50/p95 per value of `by` of the rows' merged `ttft_hit`/`ttft_miss`
    histograms (`histogram.group_percentiles`); outcomes without data are absent."""
    answer: dict[int, dict[str, dict[str, float | None]]] = {}
    outs, group = np.unique(rows[by].to_numpy().astype(np.int64), return_inverse=True)
    for outcome, column in (("hit", "ttft_hit"), ("miss", "ttft_miss")):
        blobs = rows[column].cast(pl.Binary)
        lengths = (blobs.bin.size().fill_null(0) // histogram.PAIR_BYTES).to_numpy()
        flat = b"".join(b for b in blobs.to_list() if b)
        values, present = histogram.group_percentiles(group, lengths, flat, len(outs))
        for i in np.flatnonzero(present).tolist():
            p50, p95 = values[i].tolist()
            answer.setdefault(int(outs[i]), {})[outcome] = {"p50": p50, "p95": p95}
    return answer
