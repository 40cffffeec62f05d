"""Fixtures for the analytics tests: the real Mooncake traces as storage frames."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import polars as pl
import pytest

from tests.analytics.reference import FRAME_SCHEMA

MOONCAKE = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "mooncake"
START_US = 1_700_000_000_000_000  # a fixed start; the traces hold ms offsets


def mooncake_frame(name: str) -> pl.DataFrame:
    """A trace mapped as its README says: ts = start + timestamp ms, prompt_tokens =
    input_length, block_size 512, block_hashes = hash_ids, one model and service,
    id = the line number. Skips when absent, fails instead under CI=true."""
    path = MOONCAKE / name
    if not path.is_file():
        reason = f"Mooncake trace {path} is not available"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason} (CI=true: failing instead of skipping)")
        pytest.skip(reason)
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    n = len(rows)
    return pl.DataFrame(
        {
            "id": list(range(1, n + 1)),
            "ts_us": [START_US + r["timestamp"] * 1000 for r in rows],
            "service": ["chat"] * n,
            "model": ["kimi"] * n,
            "prompt_tokens": [r["input_length"] for r in rows],
            "cached_tokens": [0] * n,
            "block_size": [512] * n,
            "block_hashes": [struct.pack(f"<{len(r['hash_ids'])}q", *r["hash_ids"]) for r in rows],
        },
    ).with_columns(
        pl.lit(None, dtype=FRAME_SCHEMA[c]).alias(c)
        for c in ("ttft_ms", "replica", "deploy", "session_id", "prefix_key", "prefix_tokens")
    )


@pytest.fixture(scope="session")
def conversation() -> pl.DataFrame:
    return mooncake_frame("conversation_trace.jsonl")


@pytest.fixture(scope="session")
def synthetic() -> pl.DataFrame:
    return mooncake_frame("synthetic_trace.jsonl")
