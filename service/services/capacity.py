"""GET /v1/capacity: the LRU capacity curve of one model's fingerprinted traffic.

A relational deployment replays every request (service.analytics.capacity). A
ClickHouse deployment replays a SHARDS sample of the block keys
(service.analytics.shards, "blocks" anchor) and says how far off each point may be:

* The rate. `CACHEWATCH_CLICKHOUSE_CAPACITY_SAMPLE_RATE` R bounds the work on a
  large range; a small range gets a larger share, enough for about
  MIN_SAMPLED_USES block uses, or all of them (the exact replay): as in SHARDS'
  fixed-size variant, the sample does not shrink with the traffic below what an
  estimate needs. A 1% sample of the Mooncake synthetic trace holds 446 keys;
  its estimate at 1 MiB tokens was 0 (clipped from below 0) against a true 0.149,
  2.4 standard errors off. The whole trace (121,877 uses) is replayed now.
* The error. Each point's `error` is the half-width of an approximate 95%
  interval, the sum of three parts:
  - 1.96 x `stderr`, the standard error over which keys the hash samples;
  - the sampled replay's own error, which that leaves out: a sampled reuse
    distance stands for R times the true one give or take its binomial spread,
    sqrt(R K (1 - R)) sampled blocks at capacity K, so the curve is also read
    at R K that much smaller and larger, and the larger move is added;
  - `unexplained_share`: what a key carrying a large share of the traffic does
    to the estimate when the hash leaves it out (the standard error cannot see
    it), read off the exactly known covered tokens.
  Over 100 disjoint 1% samples (50 at 2%) of each Mooncake trace the exact
  value lay inside in 94-100% of them at each size, and over 100 overlapping
  samples at 5-50% in 89-100% (1.96 standard errors alone: 66-100%). The
  estimate is clipped to [0, 1], as the true value is.
* No estimate (null, the reason in `no_estimate`) where the sample cannot size
  the cache: R K below one block, i.e. a cache below the sample's resolution of
  1/R blocks, where every size looks alike to it; or no sampled use. A cache
  smaller than one block hits nothing: 0, exactly.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from service import repository
from service.analytics import shards
from service.analytics._arrays import Ints
from service.analytics.capacity import capacity_curve
from service.analytics.shards import (
    SAMPLE_MODULUS,
    SampledCapacityResult,
    sample_sql,
    sample_threshold,
    sampled_curve_from_uses,
)
from service.clickhouse import clickhouse_of
from service.clickhouse import reads as ch_reads
from service.clickhouse.client import ClickHouse

#: The sampled replay gets at least about this many block uses (all, below it):
#: 0.1-0.3 s of replay here, 1% of 25 million uses.
MIN_SAMPLED_USES = 250_000
#: The stated interval's confidence, and its two-sided normal quantile.
CONFIDENCE = 0.95
_Z = 1.959963984540054
ERROR_MEANING = (
    "error: half-width of an approximate 95% interval for each hit_rate: the exact LRU "
    "replay's token hit rate lies within hit_rate +/- error. It adds 1.96 x stderr (the "
    "standard error over which block keys the hash samples), the sampled replay's own "
    "error (how far hit_rate moves with the scaled cache, rate x blocks, one binomial "
    "standard deviation smaller or larger) and the share of tokens the sample misstates "
    "beyond its error when it leaves out or takes in a key carrying much of the traffic. "
    "0 at rate 1, the exact replay. A null hit_rate has its reason in no_estimate."
)


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
        return sampled_capacity(ch, model, from_us, to_us, sizes, sample_rate)
    frame = repository.load_block_frame(session, model=model, from_us=from_us, to_us=to_us)
    result = capacity_curve(frame, sizes)
    return {
        "model": model,
        "requests": frame.height,
        "block_size": result.block_size,
        "ceiling": result.ceiling,
        "points": [{"tokens": p.tokens, "hit_rate": p.hit_rate} for p in result.points],
    }


def sampled_capacity(
    ch: ClickHouse,
    model: str | None,
    from_us: int | None,
    to_us: int | None,
    sizes: Sequence[int],
    rate: float,
    min_uses: int = MIN_SAMPLED_USES,
) -> dict[str, Any]:
    """The curve of a ClickHouse deployment (module docstring): the exact totals
    of the range, then the sampled uses at `sample_rate_for(rate, ...)`, replayed."""
    totals = ch_reads.capacity_totals(ch, model, from_us, to_us)
    requests = int(totals["requests"].sum())
    if requests == 0:
        empty = [{"tokens": int(c), "hit_rate": None} for c in sizes]
        return {"model": model, "requests": 0, "block_size": None, "ceiling": None, "points": empty}
    block_size = int(
        totals.sort(["requests", "block_size"], descending=[True, False])["block_size"][0]
    )
    used = sample_rate_for(rate, int(totals["uses"].sum()), min_uses)
    uses = ch_reads.sampled_uses(ch, model, from_us, to_us, sample_sql("key", used))
    counts = uses.group_by("id", maintain_order=True).len()["len"].to_numpy()
    models = uses["model"].rank("dense").to_numpy().astype(np.int64)
    estimate = estimate_points(
        uses["key"].to_numpy(),
        uses["tokens"].to_numpy(),
        counts.astype(np.int64),
        models if uses["model"].n_unique() > 1 else None,
        sizes=sizes,
        rate=used,
        block_size=block_size,
        prompt_tokens=int(totals["prompt_total"].sum()),
        covered_tokens=int(totals["covered_total"].sum()),
    )
    return {"model": model, "requests": requests, **estimate.answer()}


def sample_rate_for(rate: float, total_uses: int, min_uses: int) -> float:
    """The rate the curve samples at, a whole number of hash buckets: at least
    `rate`, and enough for about `min_uses` of the range's `total_uses` (all of
    them when it holds fewer)."""
    threshold = sample_threshold(rate)
    if total_uses > 0 and min_uses > 0:
        wanted = math.ceil(SAMPLE_MODULUS * min_uses / total_uses)
        threshold = max(threshold, min(SAMPLE_MODULUS, wanted))
    return threshold / SAMPLE_MODULUS


@dataclass(frozen=True)
class SampledPoint:
    """One size's estimate: `error` the 95% half-width (module docstring), or
    `no_estimate` the reason there is none."""

    tokens: int
    hit_rate: float | None
    stderr: float | None
    error: float | None
    no_estimate: str | None


@dataclass(frozen=True)
class SampledAnswer:
    """The curve as replayed at the capacities and their shifted ones, each asked
    size's answer, and the sample's `unexplained_share`."""

    curve: SampledCapacityResult
    points: list[SampledPoint]
    excess: float

    def answer(self) -> dict[str, Any]:
        """The response's fields from `block_size` on (CapacityOut)."""
        curve = self.curve
        stderr = curve.ceiling_stderr
        ceiling_error = None if stderr is None else _Z * stderr + self.excess
        return {
            "block_size": curve.block_size,
            "ceiling": curve.ceiling,
            "points": [{"tokens": p.tokens, "hit_rate": p.hit_rate} for p in self.points],
            "sample": {
                "rate": curve.rate,
                "sampled_accesses": curve.sampled_accesses,
                "sampled_keys": curve.sampled_keys,
                "ceiling_stderr": curve.ceiling_stderr,
                "stderr": [p.stderr for p in self.points],
                "confidence": CONFIDENCE,
                "ceiling_error": ceiling_error,
                "error": [p.error for p in self.points],
                "no_estimate": [p.no_estimate for p in self.points],
                "error_meaning": ERROR_MEANING,
            },
        }


def estimate_points(
    keys: Ints,
    tokens: Ints,
    counts: Ints,
    groups: Ints | None,
    *,
    sizes: Sequence[int],
    rate: float,
    block_size: int,
    prompt_tokens: int,
    covered_tokens: int,
) -> SampledAnswer:
    """Each size's estimate and error from the sampled uses (the arguments of
    `sampled_curve_from_uses`): one replay answers each capacity K and the two
    shifted ones, R K -/+ sqrt(R K (1 - R)) sampled blocks, whose estimates bound
    the sampled replay's own error."""
    blocks = [int(c) // block_size for c in sizes]
    probes = [_shifted(k, rate) for k in blocks]
    curve = sampled_curve_from_uses(
        keys,
        tokens,
        counts,
        sizes_tokens=[b * block_size for probe in probes for b in probe],
        rate=rate,
        block_size=block_size,
        prompt_tokens=prompt_tokens,
        covered_tokens=covered_tokens,
        groups=groups,
    )
    excess = unexplained_share(keys, tokens, rate, covered_tokens, prompt_tokens)
    points = [
        _point(int(c), k, rate, curve.points[3 * i : 3 * i + 3], excess)
        for i, (c, k) in enumerate(zip(sizes, blocks, strict=True))
    ]
    return SampledAnswer(curve, points, excess)


def unexplained_share(
    keys: Ints, tokens: Ints, rate: float, covered_tokens: int, prompt_tokens: int
) -> float:
    """How far the sample's estimate of the exactly known covered tokens misses
    them beyond its own 95% error, as a share of the prompt tokens.

    The standard error cannot see a key that carries a large share of the
    traffic (a shared system prompt's first block) when the hash leaves it out,
    and overstates nothing when it lets it in: the miss on the covered tokens
    shows either. A key's lost tokens are between none and all of the tokens it
    covers, so the losses the sample misstates that way are at most this excess
    (0 when the covered tokens come out within their error, as on the synthetic
    trace; up to 0.04 on the conversation trace, whose one root block carries 4%
    of the tokens)."""
    if prompt_tokens <= 0 or len(keys) == 0:
        return 0.0
    _, unit = np.unique(np.asarray(keys, dtype=np.int64), return_inverse=True)
    per_key = np.bincount(unit, weights=np.asarray(tokens, dtype=np.float64))
    estimate = float(per_key.sum()) / rate
    spread = math.sqrt((1 - rate) / (rate * rate) * float(per_key @ per_key))
    return max(0.0, abs(estimate - covered_tokens) - _Z * spread) / prompt_tokens


def _shifted(blocks: int, rate: float) -> tuple[int, int, int]:
    """(K, K_low, K_high): the capacity and those whose scaled caches are one
    binomial standard deviation of a sampled distance at K below and above R K."""
    scaled = rate * blocks
    spread = math.sqrt(scaled * (1 - rate))
    low = max(0, math.floor((scaled - spread) / rate))
    return blocks, low, math.ceil((scaled + spread) / rate)


def _point(
    tokens: int, blocks: int, rate: float, probes: Sequence[shards.SampledPoint], excess: float
) -> SampledPoint:
    """A size's answer from its three estimates (`_shifted`'s capacities) and the
    sample's `unexplained_share`."""
    at, low, high = (p.hit_rate for p in probes)
    if blocks == 0:
        return SampledPoint(tokens, 0.0, 0.0, 0.0, None)  # holds no block: no hit
    if rate * blocks < 1:
        reason = (
            f"a {rate:.4g} sample's cache of this size holds {rate * blocks:.3g} blocks, "
            f"fewer than one: it cannot size caches below {math.ceil(1 / rate)} blocks"
        )
        return SampledPoint(tokens, None, None, None, reason)
    if at is None or low is None or high is None:
        return SampledPoint(tokens, None, None, None, "no block use of the range is sampled")
    stderr = probes[0].stderr or 0.0
    replay = max(high - at, at - low)
    return SampledPoint(tokens, at, stderr, _Z * stderr + replay + excess, None)
