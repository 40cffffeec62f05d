"""GET /v1/capacity: the LRU capacity curve of one model's fingerprinted traffic."""

from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from service import repository
from service.analytics.capacity import capacity_curve
from service.analytics.shards import sample_sql, sampled_curve_from_uses
from service.clickhouse import clickhouse_of
from service.clickhouse import reads as ch_reads
from service.clickhouse.client import ClickHouse


class AmbiguousModel(ValueError):
    """No model was named and the data holds several."""


def capacity(
    session: Session,
    *,
    model: str | None,
    from_us: int | None,
    to_us: int | None,
    sizes: Sequence[int],
    sample_rate: float = 0.01,
) -> dict[str, Any]:
    if model is None:
        models = repository.distinct_models(session, limit=2)
        if len(models) > 1:
            raise AmbiguousModel("`model` is required: the records hold several models")
        model = models[0] if models else None
    if (ch := clickhouse_of(session)) is not None:
        return _sampled(ch, model, from_us, to_us, sizes, sample_rate)
    frame = repository.load_block_frame(session, model=model, from_us=from_us, to_us=to_us)
    result = capacity_curve(frame, sizes)
    return {
        "model": model,
        "requests": frame.height,
        "block_size": result.block_size,
        "ceiling": result.ceiling,
        "points": [{"tokens": p.tokens, "hit_rate": p.hit_rate} for p in result.points],
    }


def _sampled(
    ch: ClickHouse,
    model: str | None,
    from_us: int | None,
    to_us: int | None,
    sizes: Sequence[int],
    rate: float,
) -> dict[str, Any]:
    """The curve of a ClickHouse deployment: a SHARDS sample of the blocks at
    `rate`, replayed with the capacity scaled down (service.analytics.shards), from
    the exact totals of the range ("blocks" anchor: the tokens the blocks cover)."""
    totals = ch_reads.capacity_totals(ch, model, from_us, to_us)
    requests = int(totals["requests"].sum())
    if requests == 0:
        empty = [{"tokens": int(c), "hit_rate": None} for c in sizes]
        return {"model": model, "requests": 0, "block_size": None, "ceiling": None, "points": empty}
    block_size = int(
        totals.sort(["requests", "block_size"], descending=[True, False])["block_size"][0]
    )
    uses = ch_reads.sampled_uses(ch, model, from_us, to_us, sample_sql("key", rate))
    counts = uses.group_by("id", maintain_order=True).len()["len"].to_numpy()
    models = uses["model"].rank("dense").to_numpy().astype(np.int64)
    curve = sampled_curve_from_uses(
        uses["key"].to_numpy(),
        uses["tokens"].to_numpy(),
        counts.astype(np.int64),
        sizes_tokens=sizes,
        rate=rate,
        block_size=block_size,
        prompt_tokens=int(totals["prompt_total"].sum()),
        covered_tokens=int(totals["covered_total"].sum()),
        groups=models if uses["model"].n_unique() > 1 else None,
    )
    return {
        "model": model,
        "requests": requests,
        "block_size": curve.block_size,
        "ceiling": curve.ceiling,
        "points": [{"tokens": p.tokens, "hit_rate": p.hit_rate} for p in curve.points],
        "sample": {
            "rate": curve.rate,
            "sampled_accesses": curve.sampled_accesses,
            "sampled_keys": curve.sampled_keys,
            "ceiling_stderr": curve.ceiling_stderr,
            "stderr": [p.stderr for p in curve.points],
        },
    }
