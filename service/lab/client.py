"""One request of the lab, sent and recorded the way docs/fingerprint.md tells
users to: the `openai` SDK against the router, streamed so TTFT is the time to
the first token, `usage` as returned (with `stream_options.include_usage`), the
replica from the answer, recorded with the client users install
(`cachewatch_client.record`, its fingerprint given the engine's own tokens:
`/apply-template`, then `/tokenize`, so block hashes follow the tokens the engine
prefills). The client's shipper posts them from its background thread in
batches, as for any application.

The engine's own view of each request (`timings.cache_n` and `prompt_n` of the
last chunk) rides along in the record's `attributes`, with the lab's phase, so a
replay can compare cachewatch with the engine request by request.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from openai import AsyncOpenAI

from cachewatch_client import Settings as ClientSettings
from cachewatch_client import Shipper, record

BLOCK_SIZE = 16  # llama.cpp reuses the cache token by token: small blocks, a close ceiling
MODEL = "smollm2"


@dataclass
class Answer:
    text: str


@dataclass
class Recorder:
    """The client's shipper for the run; every record it builds is also kept for
    the fixture (`records`)."""

    cachewatch: str
    token: str
    records: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    shipper: Shipper = field(init=False)

    def __post_init__(self) -> None:
        settings = ClientSettings.resolve(url=self.cachewatch, token=self.token, service="lab")
        self.shipper = Shipper(settings, on_record=self.records.append)

    async def post_event(self, http: httpx.AsyncClient, event: dict[str, Any]) -> None:
        response = await http.post(
            f"{self.cachewatch}/v1/events",
            json=event,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=30,
        )
        response.raise_for_status()

    async def run(self, stop: asyncio.Event) -> None:
        """Until `stop`, then until every record is answered; fail on any lost or
        rejected record."""
        await stop.wait()
        if not await asyncio.to_thread(self.shipper.flush, 120):
            raise RuntimeError("cachewatch did not take the lab's records within 2 minutes")
        counts = self.shipper.stats()
        if counts.rejected or counts.dropped or counts.errors:
            raise RuntimeError(f"cachewatch_client lost or refused lab records: {counts}")


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
        record(
            body,
            usage,
            started=started,
            first_token=first_token or done,
            finished=done,
            service=service,
            deploy=labels.get("deploy"),
            session_id=labels.get("session_id"),
            scenario=labels.get("scenario"),
            request_id=request_id,
            replica=replica,
            prompt_ids=ids,
            block_size=BLOCK_SIZE,
            attributes={
                **labels.get("attributes", {}),
                "engine_cache_n": int(timings.get("cache_n", -1)),
                "engine_prompt_n": int(timings.get("prompt_n", -1)),
                "engine_prompt_ids": len(ids),
            },
            shipper=self.recorder.shipper,
        )
        return Answer("".join(text).strip())
