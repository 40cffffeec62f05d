"""A deliberately naive implementation of contract section 4, for tests only.

Written straight from the contract's words: requests in order, and for each one a
scan over *all* earlier requests (backwards, so that the first carrier found is
the most recent). Quadratic, obviously right, and independent of the vectorized
code it checks (no shared helpers, no sorting tricks). With a caching profile
(section 4a) a record carries `min_prompt_tokens` and `ttl_s`, already resolved
as the caller does, and the rewarm causes follow the full order `below_minimum`,
`concurrent`, `expiry`, `routing`, `eviction`, `unknown`. Where the contract is
silent it follows the conventions listed in `service.analytics.requests`.

Records are friendly dicts: the storage columns, with `block_hashes` a list of
ints (or None). `to_frame` packs them the way the storage layer does.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

import polars as pl

Record = dict[str, Any]

FRAME_SCHEMA: dict[str, pl.DataType] = {
    "id": pl.Int64(),
    "ts_us": pl.Int64(),
    "service": pl.String(),
    "model": pl.String(),
    "prompt_tokens": pl.Int64(),
    "cached_tokens": pl.Int64(),
    "ttft_ms": pl.Float64(),
    "replica": pl.String(),
    "deploy": pl.String(),
    "session_id": pl.String(),
    "block_size": pl.Int64(),
    "block_hashes": pl.Binary(),
    "prefix_key": pl.Int64(),
    "prefix_tokens": pl.Int64(),
    "min_prompt_tokens": pl.Int64(),
    "ttl_s": pl.Float64(),
}

DEFAULTS: Record = {
    "service": "svc",
    "model": "m",
    "cached_tokens": 0,
    "ttft_ms": None,
    "replica": None,
    "deploy": None,
    "session_id": None,
    "block_size": None,
    "block_hashes": None,
    "prefix_key": None,
    "prefix_tokens": None,
    # The caching profile as the caller resolves it (contract section 4a): the
    # minimum prompt the provider caches (None or 0: any) and the TTL in seconds
    # (the record's cache_ttl_s, else the profile's; None: never expires).
    "min_prompt_tokens": None,
    "ttl_s": None,
}


def record(**fields: Any) -> Record:
    """A record with the optional fields defaulted (id, ts_us, prompt_tokens needed)."""
    out = dict(DEFAULTS)
    out.update(fields)
    return out


def pack(hashes: Sequence[int] | None) -> bytes | None:
    if hashes is None:
        return None
    return struct.pack(f"<{len(hashes)}q", *hashes)


def to_frame(records: Iterable[Record]) -> pl.DataFrame:
    """Storage-shaped frame: block_hashes packed as little-endian int64."""
    rows = [{**DEFAULTS, **r} for r in records]
    data = {
        name: [pack(r[name]) if name == "block_hashes" else r[name] for r in rows]
        for name in FRAME_SCHEMA
    }
    return pl.DataFrame(data, schema=FRAME_SCHEMA)


def ordered(records: Iterable[Record]) -> list[Record]:
    """Requests are ordered by ts, ties by arrival order (the id)."""
    return sorted(records, key=lambda r: (r["ts_us"], r["id"]))


def measured_blocks(r: Record) -> tuple[list[tuple[str, int]], int]:
    """The blocks a request is measured on, and tokens per block. A prefix_hash is
    one block of prefix_tokens tokens, in its own key space."""
    if r["block_hashes"]:
        return [("block", h) for h in r["block_hashes"]], r["block_size"] or 0
    if r["prefix_key"] is not None:
        return [("prefix", r["prefix_key"])], r["prefix_tokens"] or 0
    return [], 0


def carried(r: Record) -> set[tuple[str, int]]:
    """Every hash the request had (its prefix_hash too when it sent blocks)."""
    keys = set(measured_blocks(r)[0])
    if r["prefix_key"] is not None:
        keys.add(("prefix", r["prefix_key"]))
    return keys


def request_metrics(records: Iterable[Record], window_s: float) -> dict[int, Record]:
    """Per-request values, keyed by id."""
    w_us = window_s * 1_000_000
    reqs = ordered(records)
    # Each request's (model, hash) pairs, computed once: reuse is per model.
    keys_of = [{(q["model"], key) for key in carried(q)} for q in reqs]
    out: dict[int, Record] = {}
    for i, r in enumerate(reqs):
        earlier = reqs[:i]

        def most_recent(key: tuple[str, int], r: Record = r, i: int = i) -> Record | None:
            """The latest earlier request to r's model with `key` (backwards from
            r, the first one found)."""
            wanted = (r["model"], key)
            for j in reversed(range(i)):
                if wanted in keys_of[j]:
                    return reqs[j]
            return None

        blocks, tokens_per_block = measured_blocks(r)
        fingerprinted = bool(blocks)
        run = 0
        for key in blocks:
            q = most_recent(key)
            if q is None or r["ts_us"] - q["ts_us"] > w_us:
                break
            run += 1
        prompt = r["prompt_tokens"]
        cached = r["cached_tokens"] or 0
        cacheable = min(prompt, run * tokens_per_block) if fingerprinted else 0
        rewarm_tokens = max(0, cacheable - cached) if fingerprinted else 0
        is_rewarm = fingerprinted and rewarm_tokens >= max(128, cacheable / 10)
        cause = None
        gap_us = None
        if is_rewarm:
            deepest = blocks[run - 1]
            q = most_recent(deepest)
            assert q is not None
            gap_us = r["ts_us"] - q["ts_us"]
            on_replica = r["replica"] is not None and any(
                (r["model"], deepest) in keys_of[j]
                and p["replica"] == r["replica"]
                and r["ts_us"] - p["ts_us"] <= w_us
                for j, p in enumerate(earlier)
            )
            minimum = r["min_prompt_tokens"] or 0
            ttl_s = r["ttl_s"]
            if prompt < minimum:
                cause = "below_minimum"  # the provider caches no prompt this short
            elif q["ttft_ms"] is not None and gap_us < q["ttft_ms"] * 1000.0:
                cause = "concurrent"
            elif ttl_s is not None and gap_us > ttl_s * 1e6:
                cause = "expiry"  # the provider let it expire
            elif r["replica"] is not None and not on_replica:
                cause = "routing"
            elif r["replica"] is not None and on_replica:
                cause = "eviction"
            else:
                cause = "unknown"

        rewrite = False
        shared = None
        prev = None
        if r["session_id"] is not None:
            for q in earlier:
                if q["session_id"] == r["session_id"]:
                    prev = q
        if r["session_id"] is not None and r["block_hashes"] and prev and prev["block_hashes"]:
            bs = prev["block_size"] or 0
            full = prev["prompt_tokens"] // bs if bs > 0 else 0
            common = 0
            for a, b in zip(r["block_hashes"], prev["block_hashes"], strict=False):
                if a != b:
                    break
                common += 1
            rewrite = common < 0.9 * full
            shared = min(common, -(-9 * full // 10))  # counted up to ceil(0.9 * full)

        if r["block_hashes"]:
            first_key, first_is_prefix = r["block_hashes"][0], False
        elif r["prefix_key"] is not None:
            first_key, first_is_prefix = r["prefix_key"], True
        else:
            first_key, first_is_prefix = None, None
        out[r["id"]] = {
            "id": r["id"],
            "ts_us": r["ts_us"],
            "fingerprinted": fingerprinted,
            "seen_blocks": run,
            "cacheable_tokens": cacheable,
            "rewarm_tokens": rewarm_tokens,
            "is_rewarm": is_rewarm,
            "rewarm_cause": cause,
            "rewarm_gap_us": gap_us,
            "history_rewrite": rewrite,
            "session_common_blocks": shared,
            "session_model_changed": prev is not None and prev["model"] != r["model"],
            "is_opening": prev is None,
            "is_hit": cached >= prompt / 2,
            "first_key": first_key,
            "first_key_is_prefix": first_is_prefix,
        }
    return out


def lru_hit_rate(records: Iterable[Record], capacity_tokens: int, block_size: int) -> float:
    """The capacity curve's definition, replayed with an OrderedDict LRU of
    floor(C / block_size) blocks. Only requests with block_hashes take part."""
    capacity = capacity_tokens // block_size
    cache: OrderedDict[tuple[str, int], None] = OrderedDict()
    hit = total = 0
    for r in ordered(records):
        if not r["block_hashes"]:
            continue
        keys = [(r["model"], h) for h in r["block_hashes"]]
        run = 0
        for k in keys:
            if k not in cache:
                break
            run += 1
        hit += min(r["prompt_tokens"], run * (r["block_size"] or 0))
        total += r["prompt_tokens"]
        for k in keys:
            if k in cache:
                cache.move_to_end(k)
            else:
                cache[k] = None
                if len(cache) > capacity:
                    cache.popitem(last=False)
    return hit / total if total else 0.0
