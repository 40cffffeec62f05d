"""Small hand-made and random traffic stored through the ingestion service, for the
tests of the services that read what the analytics pass made of it."""

import random
from typing import Any

import orjson
from sqlalchemy.orm import Session

from service.services.ingestion import ingest_usage

T0 = 1_764_399_600  # a whole hour (2025-11-29T07:00:00Z)
US = 1_000_000


def rec(name: str, ts: float, blocks: list[int] | None, **extra: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "request_id": name,
        "ts": ts,
        "service": extra.pop("service", "assistant"),
        "model": extra.pop("model", "m"),
        "prompt_tokens": extra.pop("prompt_tokens", 100 * len(blocks or [1, 2])),
        "cached_tokens": extra.pop("cached_tokens", 0),
        **extra,
    }
    if blocks is not None:
        record |= {"block_size": 100, "block_hashes": blocks}
    return record


def traffic(n: int, seed: int, hours: float = 4.0) -> list[dict[str, Any]]:
    """Shared prefixes on two replicas, sessions, some records without blocks."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        prefix = rng.randrange(4)
        blocks = [prefix, 10 + prefix * 10 + rng.randrange(3), 1000 + i]
        out.append(
            rec(
                f"t{seed}-{i}",
                T0 + rng.uniform(0, hours * 3600),
                blocks if rng.random() < 0.9 else None,
                cached_tokens=rng.choice([0, 100, 200]),
                replica=rng.choice(["a", "b", None]),
                deploy=rng.choice(["v1", "v2"]),
                ttft_ms=rng.uniform(50, 900),
                session_id=rng.choice([None, f"s{rng.randrange(12)}"]),
                service=rng.choice(["assistant", "search"]),
            )
        )
    return out


#: Anthropic-style list prices per million tokens, and a models file giving them
#: to every `claude-*` model.
INPUT, CACHED, WRITE = 3.00, 0.30, 3.75
MODELS_FILE = f"""
[[model]]
match = "claude-*"
provider = "anthropic"
input_usd_per_mtok = {INPUT}
cached_usd_per_mtok = {CACHED}
write_usd_per_mtok = {WRITE}
"""
#: 20 blocks of 100 tokens
BLOCKS = list(range(1, 21))


def drop_traffic() -> list[dict[str, Any]]:
    """Two hours of a warm prefix (95% cached), then two hours where it is lost, on a
    model MODELS_FILE prices: one regression with a cost."""
    records = []
    for i in range(240):
        after = i >= 120
        records.append(
            rec(f"r{i}", T0 + i * 60, [i % 2 * 1000 + b for b in BLOCKS] if after else BLOCKS,
                prompt_tokens=2000, cached_tokens=0 if after else 1900, model="claude-x")
        )  # fmt: skip
    return records


def store(session: Session, records: list[dict[str, Any]]) -> None:
    body = b"\n".join(orjson.dumps({k: v for k, v in r.items() if v is not None}) for r in records)
    outcome = ingest_usage(
        session,
        body,
        content_encoding=None,
        max_decompressed_bytes=1 << 26,
        received_us=(T0 + 86_400) * US,
    )
    assert outcome.rejected == 0 and outcome.accepted == len(records), outcome.errors
