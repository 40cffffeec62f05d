"""One request of the lab, sent and recorded the way docs/fingerprint.md tells
users to: the `openai` SDK against the router, streamed so TTFT is the time to
the first token, `usage` as returned (with `stream_options.include_usage`), the
replica from the answer, and the fingerprint from `cachewatch_client.fingerprint` with the
engine's own tokens (`/apply-template`, then `/tokenize`), so block hashes follow
the tokens the engine prefills. Records go to cachewatch from a background queue
in batches, as the docs advise for production.

The engine's own view of each request (`timings.cache_n` and `prompt_n` of the
last chunk) rides along in the record's `attributes`, with the lab's phase, so a
replay can compare cachewatch with the engine request by request.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from openai import AsyncOpenAI

from cachewatch_client.fingerprint import fingerprint

BLOCK_SIZE = 16  # llama.cpp reuses the cache token by token: small blocks, a close ceiling
MODEL = "smollm2"


@dataclass
class Answer:
    text: str
    record: dict[str, Any]


@dataclass
class Recorder:
    """The records of the run: posted to cachewatch in batches, and all kept for the
    fixture (`records`)."""

    cachewatch: str
    token: str
    records: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    _pending: list[dict[str, Any]] = field(default_factory=list)

    def add(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        self._pending.append(record)

    async def flush(self, http: httpx.AsyncClient) -> None:
        batch, self._pending = self._pending, []
        if not batch:
            return
        answer = await self._post(http, "/v1/usage", batch)
        if answer["rejected"]:
            raise RuntimeError(f"cachewatch rejected lab records: {answer['errors'][:3]}")

    async def post_event(self, http: httpx.AsyncClient, event: dict[str, Any]) -> None:
        await self._post(http, "/v1/events", event)

    async def _post(self, http: httpx.AsyncClient, path: str, payload: Any) -> Any:
        response = await http.post(
            f"{self.cachewatch}{path}",
            json=payload,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
        )
        response.raise_for_status()
        return response.json()

    async def run(self, http: httpx.AsyncClient, stop: asyncio.Event) -> None:
        """Post what is pending every 2 s until `stop`, then once more."""
        while not stop.is_set():
            await self.flush(http)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=2)
        await self.flush(http)


class EngineTokens:
    """The ids the engine prefills for a body: its chat template, then its tokenizer
    (llama-server's `/apply-template` and `/tokenize`), from one replica."""

    def __init__(self, http: httpx.AsyncClient, replica_url: str):
        self.http = http
        self.url = replica_url

    async def __call__(self, body: dict[str, Any]) -> list[int]:
        rendered = await self.http.post(f"{self.url}/apply-template", json=body, timeout=60)
        rendered.raise_for_status()
        tokens = await self.http.post(
            f"{self.url}/tokenize",
            json={"content": rendered.json()["prompt"], "add_special": True, "parse_special": True},
            timeout=60,
        )
        tokens.raise_for_status()
        return [int(t) for t in tokens.json()["tokens"]]


@dataclass
class Lab:
    """What a request needs: the router's SDK client, the engine's tokens, the
    recorder, and a counter for request ids."""

    openai: AsyncOpenAI
    tokens: EngineTokens
    recorder: Recorder
    run_id: str
    seed: int
    sent: int = 0

    async def ask(self, body: dict[str, Any], *, service: str, labels: dict[str, Any]) -> Answer:
        """Send `body` through the router, streamed; record what the docs say to."""
        ids = await self.tokens(body)
        self.sent += 1
        request_id = f"lab-{self.run_id}-{self.sent:05d}"
        started = time.time()
        stream = await self.openai.chat.completions.create(
            **body, stream=True, stream_options={"include_usage": True}
        )
        text: list[str] = []
        first_token: float | None = None
        usage: Any = None
        timings: dict[str, Any] = {}
        replica = None
        async for chunk in stream:
            replica = chunk.model or replica
            for choice in chunk.choices:
                delta = choice.delta
                if first_token is None and (delta.content or delta.tool_calls):
                    first_token = time.time()
                text.append(delta.content or "")
            if chunk.usage is not None:
                usage = chunk.usage
            timings = (chunk.model_extra or {}).get("timings") or timings
        done = time.time()
        if usage is None:
            raise RuntimeError("the engine sent no usage: stream_options.include_usage ignored")
        record = {
            "request_id": request_id,
            "ts": started,
            "service": service,
            "model": body["model"],
            "replica": replica,
            "ttft_ms": round(((first_token or done) - started) * 1000, 1),
            "latency_ms": round((done - started) * 1000, 1),
            "usage": usage.model_dump(exclude_none=True),
            **{k: v for k, v in labels.items() if k != "attributes"},
            "attributes": {
                **labels.get("attributes", {}),
                "engine_cache_n": int(timings.get("cache_n", -1)),
                "engine_prompt_n": int(timings.get("prompt_n", -1)),
                "engine_prompt_ids": len(ids),
            },
            **fingerprint(body, prompt_ids=ids, block_size=BLOCK_SIZE),
        }
        self.recorder.add(record)
        return Answer("".join(text).strip(), record)
