"""The real Mooncake traces, posted through the API, reproduce the published
cacheable fraction and LRU capacity curve (../shared/traces/README.md)."""

from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient

from tests.conftest import shared_path

START_MS = 1_764_399_600_000
KI = 1024
EXPECTED = {
    "conversation_trace.jsonl": (
        0.3736,
        {
            16 * KI: 0.0329,
            64 * KI: 0.0418,
            256 * KI: 0.0430,
            KI * KI: 0.0560,
            4 * KI * KI: 0.1847,
            16 * KI * KI: 0.3415,
        },
    ),
    "synthetic_trace.jsonl": (0.6512, {3_000_000: 0.3151, 16 * KI * KI: 0.6406}),
}


def records_of(path: Path) -> list[dict[str, Any]]:
    """The README's mapping from a trace line to a usage record."""
    records = []
    for number, line in enumerate(path.read_bytes().splitlines()):
        entry = orjson.loads(line)
        records.append(
            {
                "request_id": str(number),
                "ts": START_MS + entry["timestamp"],
                "service": "kimi",
                "model": "mooncake",
                "prompt_tokens": entry["input_length"],
                "completion_tokens": entry["output_length"],
                "block_size": 512,
                "block_hashes": entry["hash_ids"],
            }
        )
    return records


@pytest.mark.parametrize("trace", sorted(EXPECTED))
def test_published_numbers_through_the_api(
    trace: str, client: TestClient, ingest_headers: dict[str, str], read_headers: dict[str, str]
) -> None:
    records = records_of(shared_path("traces", "mooncake", trace))
    for start in range(0, len(records), 2000):
        body = b"\n".join(orjson.dumps(r) for r in records[start : start + 2000])
        answer = client.post("/v1/usage", content=body, headers=ingest_headers).json()
        assert answer["accepted"] == len(records[start : start + 2000])
    cacheable, lru = EXPECTED[trace]

    totals = client.get("/v1/metrics", headers=read_headers).json()["totals"]
    assert totals["requests"] == len(records)
    assert totals["cacheable_fraction"] == pytest.approx(cacheable, abs=1e-4)

    sizes = ",".join(str(s) for s in lru)
    curve = client.get("/v1/capacity", params={"sizes": sizes}, headers=read_headers).json()
    assert curve["block_size"] == 512
    assert curve["ceiling"] == pytest.approx(cacheable, abs=1e-4)
    got = {p["tokens"]: p["hit_rate"] for p in curve["points"]}
    for size, expected in lru.items():
        assert got[size] == pytest.approx(expected, abs=1e-4), size
