"""The lab's requests (`service.lab.client`) recorded through `cachewatch_client`:
the lab's `Lab.ask` against the loopback fake OpenAI server
(`tests/client/fake_providers.py`) in place of the llama.cpp router, its
`Recorder` shipping to a real `cachewatch serve`. The records carry the block
hashes of the engine's token ids, the engine's counters and the lab's labels, and
cachewatch stores them as built."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from openai import AsyncOpenAI
from sqlalchemy import select
from sqlalchemy.orm import Session

from cachewatch_client import ShipperStats
from cachewatch_client.fingerprint import fingerprint
from service.ingest.hashing import key_bytes
from service.lab.client import BLOCK_SIZE, Lab, Recorder
from service.models import UsageRecord
from tests.client.fake_providers import DEFAULT_REPLY, FakeProviders
from tests.client.fixtures import Cachewatch
from tests.conftest import is_postgres_run

pytestmark = pytest.mark.skipif(is_postgres_run(), reason="touches no database: run once")

MODEL = "smollm2"
SYSTEM = {"role": "system", "content": "You are the lab's assistant. " * 10}
LABELS: dict[str, Any] = {"deploy": "v1", "session_id": "s1", "attributes": {"lab_phase": "p"}}


def engine_ids(body: dict[str, Any]) -> list[int]:
    """Stand-in token ids of a body, one per character of its messages' text: a
    longer conversation's ids extend the shorter's, as an engine's would."""
    text = "".join(f"<{m['role']}>{m['content']}" for m in body["messages"])
    return [ord(c) for c in text]


async def tokens(body: dict[str, Any]) -> list[int]:
    return engine_ids(body)


def conversation(turns: int) -> list[dict[str, Any]]:
    """The bodies of a conversation's first `turns` requests, each extending the last."""
    messages: list[dict[str, Any]] = [SYSTEM]
    bodies = []
    for n in range(turns):
        messages = [*messages, {"role": "user", "content": f"question {n}"}]
        bodies.append({"model": MODEL, "messages": messages, "max_tokens": 16})
        messages = [*messages, {"role": "assistant", "content": DEFAULT_REPLY}]
    return bodies


def new_lab(providers: FakeProviders, recorder: Recorder) -> Lab:
    client = AsyncOpenAI(base_url=providers.openai_base_url, api_key="x")
    return Lab(client, tokens, recorder, run_id="t", seed=1)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_lab_records_through_the_client(
    providers: FakeProviders, cachewatch: Cachewatch
) -> None:
    providers.delay_first_byte_s = 0.05
    recorder = Recorder(cachewatch.url, cachewatch.token)
    lab = new_lab(providers, recorder)
    stop = asyncio.Event()
    running = asyncio.create_task(recorder.run(stop))
    bodies = conversation(3)
    try:
        answers = [await lab.ask(body, service="assistant", labels=LABELS) for body in bodies]
    finally:
        stop.set()
        await running  # flushed; raises if a record was lost or rejected
        recorder.shipper.close(5)
    assert [answer.text for answer in answers] == [DEFAULT_REPLY] * 3
    assert recorder.shipper.stats() == ShipperStats(queued=3, sent=3)

    served = providers.served
    assert [s.body["messages"] for s in served] == [b["messages"] for b in bodies]
    assert all(s.stream and s.body["stream_options"] == {"include_usage": True} for s in served)
    ids = [f"lab-t-{n:05d}" for n in (1, 2, 3)]
    assert [r["request_id"] for r in recorder.records] == ids
    for record, body, answer in zip(recorder.records, bodies, served, strict=True):
        prompt_ids = engine_ids(body)
        expected = fingerprint(body, prompt_ids=prompt_ids, block_size=BLOCK_SIZE)
        assert record["block_size"] == BLOCK_SIZE == 16
        assert record["block_hashes"] == expected["block_hashes"]
        assert len(record["block_hashes"]) == -(-len(prompt_ids) // BLOCK_SIZE)
        assert record["segments"] == expected["segments"]
        assert record["usage"] == answer.usage
        assert (record["service"], record["model"], record["replica"]) == (
            "assistant",
            MODEL,
            MODEL,  # the fake answers with the model asked for: the lab's replica
        )
        assert (record["deploy"], record["session_id"]) == ("v1", "s1")
        assert record["attributes"] == {
            "lab_phase": "p",
            "engine_cache_n": -1,  # the fake sends no llama.cpp `timings`
            "engine_prompt_n": -1,
            "engine_prompt_ids": len(prompt_ids),
        }
        assert 50 <= record["ttft_ms"] <= record["latency_ms"]
    # Each turn's ids extend the last: its block hashes begin with the last's whole blocks.
    first, second = (r["block_hashes"] for r in recorder.records[:2])
    assert second[: len(first) - 1] == first[:-1]

    with Session(cachewatch.engine) as session:
        query = select(UsageRecord).where(UsageRecord.request_id.in_(ids))
        rows = {row.request_id: row for row in session.scalars(query)}
    assert sorted(rows) == ids
    for record, answer in zip(recorder.records, served, strict=True):
        row = rows[record["request_id"]]
        usage = answer.usage
        assert (row.prompt_tokens, row.cached_tokens, row.completion_tokens) == (
            usage["prompt_tokens"],
            usage["prompt_tokens_details"]["cached_tokens"],
            usage["completion_tokens"],
        )
        assert row.block_hashes == b"".join(key_bytes(h) for h in record["block_hashes"])
        assert row.segments == record["segments"]
        assert (row.service, row.deploy, row.session_id, row.replica) == (
            "assistant",
            "v1",
            "s1",
            MODEL,
        )
        assert row.attributes == record["attributes"]
        assert abs(row.ts_us - record["ts"] * 1e6) <= 1
        assert row.ttft_ms == pytest.approx(record["ttft_ms"])
    assert rows[ids[2]].cached_tokens > 0  # the fake's cache saw the shared prefix


@pytest.mark.anyio
async def test_recorder_fails_the_run_when_cachewatch_refuses(
    providers: FakeProviders, cachewatch: Cachewatch
) -> None:
    recorder = Recorder(cachewatch.url, f"cw_wrong_{uuid.uuid4().hex}")
    lab = new_lab(providers, recorder)
    stop = asyncio.Event()
    running = asyncio.create_task(recorder.run(stop))
    try:
        await lab.ask(conversation(1)[0], service="assistant", labels=LABELS)
    finally:
        stop.set()
    with pytest.raises(RuntimeError, match="lost or refused"):
        await running
    recorder.shipper.close(5)
    assert recorder.shipper.stats().dropped == 1  # answered 401: not retried
