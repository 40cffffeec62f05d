"""A SHARDS sample of the LRU capacity curve: replay a hashed 1-in-1/R share of the
blocks instead of all of them.

Waldspurger, Park, Garthwaite and Ahmad, "Efficient MRC Construction with SHARDS"
(FAST '15): keep every access of a block whose key hashes below R of the hash
range, so a sampled block keeps *all* its accesses and the sampled trace is a
spatially uniform 1-in-1/R share of the blocks. Between two accesses of a sampled
block the sampled trace touches about R times the distinct blocks the full trace
does, so its stack distance d' estimates R * d, and "resident in a cache of K
blocks" (d < K) becomes d' < R * K: the replay runs over the sampled accesses with
the capacity scaled down by R. `capacity.py`'s machinery does the replay unchanged
(`running_max_distance` over the sampled keys, in request order, each request's
sampled blocks in their order).

The predicate is ClickHouse's `intHash64(key) % 10000 < T` with T = round(R *
10000), so the database can ship only the sampled block uses (`sample_sql`), and
here `in_sample` is the same test bit for bit. intHash64 is the MurmurHash3 64-bit
finalizer `fmix64` applied to key ^ 0x4CF2D2BAAE6DA887 (ClickHouse's fixed seed,
in its 2017 sources as in 26.9); int64 keys are taken as their uint64
bits, as ClickHouse does (checked against chdb's intHash64 in the tests).
Hashing matters: Mooncake's ids are small sequential
integers, and `key % 10000` would keep one trace region rather than a random share.
The rate used everywhere is the effective T / 10000.

The estimator. A request's hit is min(prompt, run * block_size), run its leading
resident blocks; that cap is the sum over its first `run` blocks of each block's
own tokens w = clamp(prompt - j * block_size, 0, block_size) (a full block, the
partial tail, or 0 past the prompt), so the hit tokens of a capacity are a plain
sum over block uses, sum of w * [use resident], and the per-request cap needs no
nonlinear correction. (Capping a scaled-up per-request count instead,
min(prompt, run_sampled / R * block_size), clips the requests whose one sampled
block counts as 1/R blocks while nothing lifts those with none: biased low.)
Whether a sampled use is in its request's leading run is judged by the running
maximum of the sampled distances of its request's sampled blocks, as the exact
replay does over all of them; chained hashes make a request's resident blocks
nearly prefix-closed, so the unsampled blocks in between rarely change the
verdict (for the unbounded cache, on both Mooncake traces at 10%, 1% and 0.1%,
never).

The plain Horvitz-Thompson sum of sampled hit tokens / R is unbiased but useless
on real traffic: the hits concentrate on a few hot keys (a shared system prompt's
first blocks), and whether those few are sampled swings it by several times the
whole hit rate (tried on 100 disjoint 1% samples of the Mooncake conversation
trace: RMSE 0.35-0.42, one sample off by 4.2). What varies little per key is what
a key *loses*: so the estimate starts from an exactly known anchor A and
subtracts the sampled losses, scaled:

    hits(K) = A - (1/R) * sum over sampled uses of w * (b - [resident at R*K])

* anchor "ceiling": A = the exact hit tokens of the unbounded cache (the blocks
  seen in an earlier request, leading run, capped as above), b = [the use is in
  that run]: the sampled sum is the tokens an unbounded cache hits and a K-block
  one misses. A hot key is a hit at almost every K and adds nothing; at K = inf
  the estimate is exact. Costs one sort of all keys (about 1/5 of the exact
  replay's time), so the frame entry point does it by default.
* anchor "blocks": A = the tokens all blocks cover, sum of min(prompt, blocks *
  block_size), b = 1: the sampled sum is every sampled miss. This is SHARDS' own
  correction (SHARDS_adj: the shortfall of the sample from its expected size is
  counted as hits) and needs only per-request totals, a trivial aggregate in SQL.

Both would be unbiased if the sampled replay's verdicts were the full replay's
(each is a fixed sum over keys, each key sampled independently with probability
R); they are clipped to [0, A], a projection onto an interval that holds the true
value (it never adds error, though near 0 it leans high); and they divide by the
exact total prompt tokens of the requests with blocks (the denominator is known,
not sampled). At R = 1 both are the exact replay, to the bit.

Measured by bench/capacity_sampled.py over 100 disjoint 1% samples (other bucket
ranges of the same hash), RMSE of the hit rate: conversation trace, "ceiling"
0.006 at 16Mi tokens, 0.020 at 4Mi, 0.024-0.027 from 16Ki to 1Mi ("blocks": 0.020
and 0.030-0.033); synthetic, "ceiling" 0.006 at 16Mi and 0.041 at 3M tokens
("blocks": 0.022 and 0.052). Bias is below 0.001 except where clipping at 0
lifts the smallest values (+0.009 at 16Ki).

The error statement. The sampling unit is the key (all its uses go in or out
together), so `stderr` is the Bernoulli-sampling standard error over keys,
sqrt((1 - R) / R^2 * sum over sampled keys of Y_k^2) / prompt tokens, Y_k the
key's sampled loss tokens above: 0 at R = 1. Requests are not the unit: a hot
key spans thousands of requests, and a spread across requests would understate
the error many times over. It leaves out the approximation of d by d' / R
(SHARDS' own error, largest where R * K is a few blocks or less; each point
reports R * K as `sampled_blocks`), and with few sampled keys it is itself noisy
(0 when no sampled key loses anything). On those 100 samples the truth lay within
2 stderr in 82-95% of them at each capacity of the conversation trace and 68-85%
of the synthetic one ("blocks": 89-98%): read it as a scale, not a guarantee.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
import polars as pl

from service.analytics._arrays import (
    I64,
    Bools,
    Ints,
    codes,
    leading_true,
    offsets_of,
    previous_occurrences,
    unpack_blobs,
)
from service.analytics.capacity import most_common, replayed_requests, running_max_distance

U64 = npt.NDArray[np.uint64]
Anchor = Literal["ceiling", "blocks"]

#: Keys hash into this many buckets; a rate is a whole number of them.
SAMPLE_MODULUS = 10_000
#: ClickHouse's intHash64(x) is fmix64(x ^ this seed) (IntHash64Impl).
INT_HASH64_SEED = 0x4CF2D2BAAE6DA887

_C1 = np.uint64(0xFF51AFD7ED558CCD)
_C2 = np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)


@dataclass(frozen=True)
class SampledPoint:
    """`hit_rate`: the estimate (None when nothing can be said: no prompt tokens,
    or no sampled block use); `stderr`: its standard error over the choice of
    sampled keys (module docstring); `sampled_blocks`: the scaled capacity R * K
    the sampled replay ran with."""

    tokens: int
    hit_rate: float | None
    stderr: float | None
    sampled_blocks: float


@dataclass(frozen=True)
class SampledCapacityResult:
    """`rate`: the effective rate T / SAMPLE_MODULUS; `anchor`: which exact total
    the estimate starts from; `ceiling`: the unbounded cache's hit rate, exact
    (stderr 0) with the "ceiling" anchor, else estimated like the points;
    `sampled_accesses` / `sampled_keys`: the block uses replayed and their
    distinct keys (the sampling units)."""

    rate: float
    anchor: Anchor
    block_size: int | None
    ceiling: float | None
    ceiling_stderr: float | None
    sampled_accesses: int
    sampled_keys: int
    points: list[SampledPoint]


def fmix64(keys: Ints) -> U64:
    """The MurmurHash3 64-bit finalizer on the keys' uint64 bits (int64 keys
    reinterpreted, arithmetic modulo 2^64)."""
    return _fmix64_inplace(_as_u64(keys))


def int_hash64(keys: Ints) -> U64:
    """ClickHouse's `intHash64`, bit for bit: fmix64(key ^ INT_HASH64_SEED)."""
    x = _as_u64(keys)
    x ^= np.uint64(INT_HASH64_SEED)
    return _fmix64_inplace(x)


def sample_threshold(rate: float) -> int:
    """T = round(rate * SAMPLE_MODULUS): a key is sampled iff its hash bucket is
    below T. Raises on a rate outside (0, 1] or one that rounds to no bucket."""
    if not 0 < rate <= 1:
        raise ValueError(f"rate must be in (0, 1], got {rate}")
    threshold = round(rate * SAMPLE_MODULUS)
    if threshold < 1:
        raise ValueError(f"rate {rate} samples no key (the smallest is 1/{SAMPLE_MODULUS})")
    return threshold


def in_sample(keys: Ints, rate: float) -> Bools:
    """intHash64(key) % SAMPLE_MODULUS < round(rate * SAMPLE_MODULUS), per key."""
    threshold = sample_threshold(rate)
    return int_hash64(keys) % np.uint64(SAMPLE_MODULUS) < np.uint64(threshold)


def sample_sql(column: str, rate: float) -> str:
    """The same predicate in ClickHouse SQL, for an integer column or expression
    (e.g. the lambda variable of `arrayFilter(h -> ..., block_hashes)`).

    `toInt64` pins the argument type (a no-op on Int64; other integer types give
    the same bits as the int64 keys here). intHash64 returns UInt64 and the
    remainder by 10000 is a UInt16 below 10000, so no signed or narrow remainder
    type is involved: the expression types and evaluates alike on 18.16 and
    current releases."""
    return f"intHash64(toInt64({column})) % {SAMPLE_MODULUS} < {sample_threshold(rate)}"


def sampled_capacity_curve(
    frame: pl.DataFrame,
    sizes_tokens: Sequence[int],
    rate: float,
    *,
    anchor: Anchor = "ceiling",
) -> SampledCapacityResult:
    """`capacity_curve` estimated from the sampled blocks (module docstring): same
    input frame, same requests (those with `block_hashes`, in (ts_us, id) order),
    same capacity in blocks (floor(C / the most common block size)). With
    `anchor="blocks"` it skips the one exact pass over all keys."""
    threshold = sample_threshold(rate)
    uses = _block_uses(frame, exact_ceiling=anchor == "ceiling")
    if uses is None:
        return _empty(threshold, anchor, None, None, sizes_tokens)
    keys, tokens, counts, groups = uses.sampled(in_sample(uses.keys, rate))
    return sampled_curve_from_uses(
        keys,
        tokens,
        counts,
        sizes_tokens=sizes_tokens,
        rate=rate,
        block_size=uses.block_size,
        prompt_tokens=uses.prompt_tokens,
        ceiling_tokens=uses.ceiling_tokens,
        covered_tokens=uses.covered_tokens,
        groups=groups,
    )


def sampled_curve_from_uses(
    keys: Ints,
    tokens: Ints,
    counts: Ints,
    *,
    sizes_tokens: Sequence[int],
    rate: float,
    block_size: int,
    prompt_tokens: int,
    ceiling_tokens: int | None = None,
    covered_tokens: int | None = None,
    groups: Ints | None = None,
) -> SampledCapacityResult:
    """The estimate from the already-sampled block uses, e.g. as ClickHouse ships
    them: `arrayFilter(i -> <sample_sql('block_hashes[i]', rate)>,
    arrayEnumerate(block_hashes))` per record, or the rows of `block_uses` (kind 0)
    with `sample_sql('key', rate)`, j = its 0-based index or `pos`:

    * `keys`: the sampled block keys, requests in replay order ((ts, id)), each
      request's blocks in their order;
    * `tokens`: per use, the tokens its block covers,
      least(block_size, greatest(0, prompt_tokens - j * block_size));
    * `counts`: per request, its number of sampled uses (requests with none may be
      left out: they do not touch the sampled cache);
    * `groups`: per use, a model code when there are several (blocks of different
      models never match), else None;
    * `block_size`: the capacity unit (capacity_curve: the most common block size
      of the requests with blocks); `prompt_tokens`: their total prompt tokens;
    * the anchor: `ceiling_tokens` (the exact hit tokens of the unbounded cache)
      if given, else `covered_tokens` (sum of least(prompt_tokens,
      length(block_hashes) * block_size)); one of them is required.

    `rate` must be the one the uses were sampled with."""
    threshold = sample_threshold(rate)
    if ceiling_tokens is not None:
        anchor: Anchor = "ceiling"
        base_total = ceiling_tokens
    elif covered_tokens is not None:
        anchor = "blocks"
        base_total = covered_tokens
    else:
        raise ValueError("give ceiling_tokens or covered_tokens: the estimate's exact anchor")
    flat: I64 = np.asarray(keys, dtype=np.int64)
    weights: I64 = np.asarray(tokens, dtype=np.int64)
    per_request: I64 = np.asarray(counts, dtype=np.int64)
    if len(flat) != len(weights) or int(per_request.sum()) != len(flat):
        raise ValueError("keys, tokens and the sum of counts must have one length")
    if len(flat) == 0:
        exact = _exact_ceiling(ceiling_tokens, prompt_tokens)
        return _empty(threshold, anchor, block_size, exact, sizes_tokens)
    group_codes: I64 | None = None if groups is None else np.asarray(groups, dtype=np.int64)
    running_max = running_max_distance(flat, group_codes, per_request[per_request > 0])
    never = len(flat) + 1  # a sampled block's first access: resident in no cache
    seen = running_max < never
    # Sampling units: key values (the predicate looks at the key only).
    uniq, unit = np.unique(flat, return_inverse=True)
    base = seen if anchor == "ceiling" else np.ones(len(flat), dtype=np.bool_)

    def estimate(resident: Bools) -> tuple[float | None, float | None]:
        if prompt_tokens <= 0:
            return None, None
        loss = np.where(base & ~resident, weights, 0)
        # Integer arithmetic, one rounding: at R = 1 the exact replay's sum.
        hits = base_total - int(loss.sum()) * SAMPLE_MODULUS / threshold
        hits = min(max(hits, 0.0), float(base_total))
        per_key = np.bincount(unit, weights=loss, minlength=len(uniq))
        r = threshold / SAMPLE_MODULUS
        variance = (1 - r) / (r * r) * float(per_key @ per_key)
        return hits / prompt_tokens, variance**0.5 / prompt_tokens

    points = []
    for c in sizes_tokens:
        blocks = _blocks(c, block_size)
        # d' < R * K  <=>  d' * MODULUS < T * K, in integers; capped at "never".
        cap = min(threshold * blocks, SAMPLE_MODULUS * never)
        hit_rate, stderr = estimate(running_max * SAMPLE_MODULUS < cap)
        points.append(SampledPoint(int(c), hit_rate, stderr, blocks * threshold / SAMPLE_MODULUS))
    ceiling: float | None
    ceiling_stderr: float | None
    if anchor == "ceiling":
        ceiling, ceiling_stderr = _exact_ceiling(ceiling_tokens, prompt_tokens), 0.0
    else:
        ceiling, ceiling_stderr = estimate(seen)
    return SampledCapacityResult(
        rate=threshold / SAMPLE_MODULUS,
        anchor=anchor,
        block_size=block_size,
        ceiling=ceiling,
        ceiling_stderr=ceiling_stderr if ceiling is not None else None,
        sampled_accesses=len(flat),
        sampled_keys=len(uniq),
        points=points,
    )


@dataclass(frozen=True)
class _BlockUses:
    """Every block use of the requests with blocks, in replay order, with what
    their requests carry; and the exact totals the estimate needs. Requests are
    kept whole (one row each), so the per-use arrays are built for sampled uses
    only."""

    keys: I64
    offsets: I64  # each request's first use (strictly increasing: no empty request)
    prompt: I64
    bsizes: I64
    model: I64 | None  # per request; None: one model
    block_size: int
    prompt_tokens: int
    covered_tokens: int
    ceiling_tokens: int | None

    def sampled(self, sel: Bools) -> tuple[I64, I64, I64, I64 | None]:
        """keys, tokens, per-request counts and model codes of the uses in `sel`."""
        idx = np.flatnonzero(sel)
        req = np.searchsorted(self.offsets, idx, side="right") - 1
        bsize = self.bsizes[req]
        tokens = np.clip(self.prompt[req] - (idx - self.offsets[req]) * bsize, 0, bsize)
        counts = np.bincount(req, minlength=len(self.offsets))
        groups = self.model[req] if self.model is not None else None
        return self.keys[idx], tokens, counts, groups


def _block_uses(frame: pl.DataFrame, *, exact_ceiling: bool) -> _BlockUses | None:
    """The frame as capacity_curve reads it; None when no request has blocks.
    `exact_ceiling`: also count the unbounded cache's hit tokens (one sort of all
    keys: a block is in it iff an earlier request carried it, within the leading
    run)."""
    req = replayed_requests(frame)
    if req.height == 0:
        return None
    flat, counts = unpack_blobs(req["block_hashes"])
    (codes_,) = codes(req["model"])
    model = codes_.astype(np.int64) if codes_.max() > 0 else None
    prompt = req["prompt_tokens"].to_numpy().astype(np.int64)
    bsizes = req["block_size"].to_numpy().astype(np.int64)
    offsets = offsets_of(counts)
    ceiling_tokens = None
    if exact_ceiling:
        request = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        groups = model[request] if model is not None else None
        occ = previous_occurrences(flat, groups, request)
        del request, groups
        seen = np.empty(len(flat), dtype=np.bool_)
        seen[occ.perm] = occ.prev_source >= 0
        run = leading_true(seen, offsets, counts)
        ceiling_tokens = int(np.minimum(prompt, run * bsizes).sum())
    return _BlockUses(
        keys=flat,
        offsets=offsets,
        prompt=prompt,
        bsizes=bsizes,
        model=model,
        block_size=most_common(bsizes),
        prompt_tokens=int(prompt.sum()),
        covered_tokens=int(np.minimum(prompt, counts * bsizes).sum()),
        ceiling_tokens=ceiling_tokens,
    )


def _fmix64_inplace(x: U64) -> U64:
    x ^= x >> _S33
    x *= _C1
    x ^= x >> _S33
    x *= _C2
    x ^= x >> _S33
    return x


def _as_u64(keys: Ints) -> U64:
    """A uint64 copy of the keys' bits (signed keys reinterpreted, not converted)."""
    arr = np.asarray(keys)
    if arr.dtype.kind == "u":
        return arr.astype(np.uint64)
    return arr.astype(np.int64).view(np.uint64)


def _exact_ceiling(ceiling_tokens: int | None, prompt_tokens: int) -> float | None:
    if ceiling_tokens is None or prompt_tokens <= 0:
        return None
    return ceiling_tokens / prompt_tokens


def _blocks(capacity_tokens: int, block_size: int | None) -> int:
    """The capacity in blocks, as capacity_curve counts it."""
    return int(capacity_tokens) // block_size if block_size else 0


def _empty(
    threshold: int,
    anchor: Anchor,
    block_size: int | None,
    ceiling: float | None,
    sizes_tokens: Sequence[int],
) -> SampledCapacityResult:
    """No sampled use: no estimate (not 0, which the sample cannot tell apart)."""
    return SampledCapacityResult(
        rate=threshold / SAMPLE_MODULUS,
        anchor=anchor,
        block_size=block_size,
        ceiling=ceiling,
        ceiling_stderr=0.0 if ceiling is not None else None,
        sampled_accesses=0,
        sampled_keys=0,
        points=[
            SampledPoint(int(c), None, None, _blocks(c, block_size) * threshold / SAMPLE_MODULUS)
            for c in sizes_tokens
        ],
    )
