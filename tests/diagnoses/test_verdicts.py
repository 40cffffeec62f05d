"""What cachewatch found for each request its provider diagnosed (service.diagnoses
.verdicts), through ingest, the analytics pass and the diagnosis rollups on the
real database: a changed system prompt, reordered tools, a rewritten history and
a model switch, each located by cachewatch's own blocks, and the agreement the
rollups add up to."""

from typing import Any

import orjson
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session

from service.diagnoses.agreement import agreement, table_text
from service.repository.diagnoses import diagnosis_counts
from service.services import analytics_pass
from service.settings import Settings

T0 = 1_764_374_400  # 2025-11-29T00:00:00Z
BS = 64
# tools [0, 100), system [100, 300), message[0] [300, 600): nine full blocks.
SEGMENTS = [("tools", 100), ("system", 200), ("message[0]", 300)]


def record(
    n: int, at_s: int, hashes: list[str], reason: str | None, **fields: Any
) -> dict[str, Any]:
    segments = [{"name": name, "hash": f"{name}-{n}", "tokens": t} for name, t in SEGMENTS]
    out: dict[str, Any] = {
        "request_id": f"r{n}",
        "ts": T0 + at_s,
        "service": "agent",
        "model": "claude-sonnet-4-5",
        "prompt_tokens": 600,
        "cached_tokens": fields.pop("cached", 0),
        "block_size": BS,
        "block_hashes": hashes,
        "segments": segments,
        **fields,
    }
    if reason is not None:
        why: dict[str, Any] = {"type": reason}
        if reason.endswith("_changed"):  # only those estimate the tokens missed
            why["cache_missed_input_tokens"] = 500
        out["diagnostics"] = {"cache_miss_reason": why}
    return out


def blocks(tag: str, same: int = 0, base: str = "a") -> list[str]:
    """Nine chained hashes, the first `same` shared with `base`'s."""
    return [f"{base}{i}" if i < same else f"{tag}{i}" for i in range(9)]


def test_each_diagnosis_is_located_by_cachewatchs_own_blocks(
    client: TestClient,
    session: Session,
    settings: Settings,
    ingest_headers: dict[str, str],
) -> None:
    rows = [
        record(0, 0, blocks("a"), None, session_id="s1"),
        # The system prompt changed at its first token (100): block 1 [64, 128)
        # holds the end of tools and the start of system.
        record(1, 30, blocks("b", same=1), "system_changed", session_id="s1", cached=64),
        # The tools reordered from their first token: nothing reusable.
        record(2, 60, blocks("c"), "tools_changed", session_id="s2"),
        # s1's history rewritten at token 400 (block 6): the first six blocks reused.
        record(
            3,
            90,
            blocks("b", same=1)[:6] + blocks("d")[6:],
            "messages_changed",
            session_id="s1",
            cached=384,
        ),
        # The same prompt on another model: nothing of it in that model's cache.
        {
            **record(4, 120, blocks("c"), "model_changed", session_id="s2"),
            "model": "claude-opus-4-5",
        },
        # Unchanged and cached: Anthropic names no reason.
        record(5, 150, blocks("c"), "unavailable", session_id="s5", cached=576),
        # Another session's new system prompt, which a third then takes up: its
        # start was seen within W (the other session warmed it), yet it differs
        # from the session's own previous request from block 1 on.
        record(6, 160, blocks("e"), None, session_id="s3"),
        record(7, 170, blocks("f", same=1, base="e"), None, session_id="s4"),
        record(
            8,
            180,
            blocks("f", same=1, base="e")[:5] + blocks("g")[5:],
            "system_changed",
            session_id="s3",
            cached=320,
        ),
    ]
    body = b"\n".join(orjson.dumps(r) for r in rows)
    answer = client.post("/v1/usage", content=body, headers=ingest_headers)
    assert answer.status_code == 200, answer.text
    assert answer.json()["accepted"] == len(rows)
    analytics_pass.catch_up(session, settings)
    counts = diagnosis_counts(session, services=["agent"])
    found = {
        r["reason"]: (r["verdict"], r["segment"], r["requests"])
        for r in counts.iter_rows(named=True)
    }
    assert found == {
        "system_changed": ("prefix_instability", "tools+system", 2),
        "tools_changed": ("prefix_instability", "tools", 1),
        "messages_changed": ("history_rewrite", "messages", 1),
        "model_changed": ("model_switch", "tools", 1),
        "unavailable": ("none", "", 1),
    }
    result = agreement(counts)
    print(table_text(result))
    assert (result.compared, result.agreed) == (5, 5)
    assert sum(counts["missed_tokens"]) == 2500
