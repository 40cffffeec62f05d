"""Real block hashes use all 64 bits: keys must never pass through floats (a null
`prefix_key` column turns into float64 in NumPy and rounds keys to 53 bits)."""

import random
import struct

import polars as pl

from service.analytics import compute_request_metrics
from service.ingest.hashing import hash_key

SCHEMA = {
    "id": pl.Int64,
    "ts_us": pl.Int64,
    "model": pl.Utf8,
    "prompt_tokens": pl.Int64,
    "cached_tokens": pl.Int64,
    "ttft_ms": pl.Float64,
    "replica": pl.Utf8,
    "session_id": pl.Utf8,
    "block_size": pl.Int64,
    "block_hashes": pl.Binary,
    "prefix_key": pl.Int64,
    "prefix_tokens": pl.Int64,
}


def frame() -> pl.DataFrame:
    rng = random.Random(3)
    rows = []
    turns = [0] * 40
    for i in range(600):
        session = rng.randrange(40)
        turns[session] += 1
        # Keys that differ only in their low bits: equal once rounded to 53 bits.
        base = [hash_key(f"system-{session % 3}")]
        history = [(hash_key(f"s{session}") & ~0xFF) | t for t in range(turns[session])]
        keys = base + history
        rows.append(
            (
                i,
                1_700_000_000_000_000 + i * 1_000_000,
                "m",
                len(keys) * 100,
                0,
                100.0,
                "a",
                f"s{session}",
                100,
                struct.pack(f"<{len(keys)}q", *keys),
                None,
                None,
            )
        )
    return pl.DataFrame(rows, schema=SCHEMA, orient="row")


def test_first_keys_are_exact_and_batches_equal_one_pass() -> None:
    data = frame()
    whole, _ = compute_request_metrics(data, 3600)
    expected_first = [struct.unpack_from("<q", b)[0] for b in data["block_hashes"]]
    assert whole["first_key"].to_list() == expected_first
    state = None
    parts = []
    for start in range(0, data.height, 50):
        part, state = compute_request_metrics(data[start : start + 50], 3600, state)
        parts.append(part)
    assert pl.concat(parts).equals(whole)
    assert whole["history_rewrite"].sum() == 0  # sessions only append here
