"""Synthetic storage-shaped requests for the analytics bench: 16 blocks of 512 tokens
each over 24 hours on 8 replicas, with realistic reuse.

Blocks 0-3 are the session's system prompt (12 prompts, 3 per service), blocks 4-13
the session's history (100,000 sessions; the same blocks on every turn), blocks
14-15 fresh per request. Each session keeps one service and one model. Replica
pod-k moves from deploy v0 to v1 at 10:00 + 15 min x k (a rolling deploy), so a
(service, replica) has 1 or 2 deploys a day. Columns as `load_usage_frame` gives
them, plus `service` and `deploy`, ordered by (ts_us, id).
"""

from __future__ import annotations

import numpy as np
import polars as pl

DAY_US = 86_400 * 1_000_000
START_US = 1_767_225_600 * 1_000_000  # 2026-01-01T00:00:00Z, a day boundary
SESSIONS = 100_000
PROMPTS = 12
REPLICAS = 8
BLOCKS = 16
BLOCK_SIZE = 512


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64: distinct int64 hashes for distinct block identities."""
    x = (x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)).astype(np.uint64)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return (x ^ (x >> np.uint64(31))).view(np.int64)


def requests(n: int, start_us: int = START_US, seed: int = 42) -> pl.DataFrame:
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.integers(0, DAY_US, n)) + start_us
    sess = rng.integers(0, SESSIONS, n)
    model = sess % 2
    system = (sess // 2) % PROMPTS
    service = system // 3
    j = np.arange(BLOCKS)[None, :]
    identity = np.where(
        j < 4,
        system[:, None] * 1000 + j,
        np.where(
            j < 14,
            10**7 + sess[:, None] * 100 + j,
            10**12 + np.arange(n)[:, None] * BLOCKS + j,
        ),
    )
    buf = _mix(identity).astype("<i8").tobytes()
    width = BLOCKS * 8
    blobs = [buf[i * width : (i + 1) * width] for i in range(n)]
    prompt = BLOCKS * BLOCK_SIZE - rng.integers(0, BLOCK_SIZE, n)
    replica = rng.integers(0, REPLICAS, n)
    switch_us = start_us + (10 * 3600 + replica * 900) * 1_000_000
    ttft = np.where(rng.random(n) < 0.05, np.nan, rng.uniform(50, 2000, n))
    return pl.DataFrame(
        {
            "id": np.arange(1, n + 1, dtype=np.int64),
            "ts_us": ts,
            "service": np.array([f"svc-{k}" for k in range(4)])[service],
            "model": np.array(["model-a", "model-b"])[model],
            "prompt_tokens": prompt,
            "cached_tokens": (prompt * rng.choice([0.0, 0.5, 0.9], n)).astype(np.int64),
            "ttft_ms": ttft,
            "replica": np.array([f"pod-{k}" for k in range(REPLICAS)])[replica],
            "deploy": np.where(ts < switch_us, "v0", "v1"),
            # A String column from the start: polars 2 infers an object array with
            # None as Object past its first rows, which IPC cannot write.
            "session_id": pl.Series(
                np.char.add("s", sess.astype(str)).tolist(), dtype=pl.String
            ).set(pl.Series(rng.random(n) >= 0.8), None),
            "block_size": np.full(n, BLOCK_SIZE, dtype=np.int64),
            "block_hashes": pl.Series(blobs, dtype=pl.Binary),
            "prefix_key": pl.Series([None] * n, dtype=pl.Int64),
            "prefix_tokens": pl.Series([None] * n, dtype=pl.Int64),
        }
    ).with_columns(pl.col("ttft_ms").fill_nan(None))
