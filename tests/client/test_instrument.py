"""`cachewatch_client.instrument` end to end: the real `openai` and `anthropic` SDKs,
sync and async, streamed and not, against the loopback fake providers
(`tests/client/fake_providers.py`), recording into a real `cachewatch serve`.

Each test compares, call by call, what cachewatch stored (its `usage_records`
table: no HTTP endpoint lists raw records) with what the fake answered
(`providers.served`): the request id is the provider's response id, the token
counts are those of the usage object the fake sent, the fingerprint is that of the
exact body the SDK sent (and agrees with `cachewatch diff` run on those bodies),
and a streamed call's TTFT ends within a few ms of the fake's first byte.

Why a few ms is the right bound: the fake runs in this process (a uvicorn thread),
so `served.first_byte` and the client's times read the same clock. The fake notes
`first_byte` just before handing its first chunk to uvicorn; the client notes its
first token when that chunk comes out of httpx's byte stream. Between the two lie
one loopback write and read and some thread switches under the GIL: well under a
millisecond on an idle machine, a few ms on a loaded one, and now and then a
thread switch of tens of ms when both cores are busy (the CI runs two suites side
by side). So every streamed call must end its TTFT within 100 ms of the first
byte, and the closest of a test's streamed calls within 15 ms: that still tells a
TTFT measured at the first byte from one measured at a later chunk or at the end
of the answer (the fake's answers take >= 200 ms here), and one slow switch does
not fail the run.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

import cachewatch_client
from cachewatch_client import Settings, Shipper, ShipperStats, instrument
from cachewatch_client.fingerprint import fingerprint
from service.ingest.hashing import key_bytes
from service.models import UsageRecord
from tests.client.fake_providers import DEFAULT_REPLY, FakeProviders, Served
from tests.client.fixtures import Cachewatch
from tests.conftest import (
    is_postgres_run,
    run_cachewatch,
)

pytestmark = pytest.mark.skipif(is_postgres_run(), reason="touches no database: run once")

MODEL = "fake-model"
DELAY_S = 0.2  # the fake's time to first byte: TTFT is clearly measured
TTFT_SLACK_S = 0.015  # the closest streamed call of a test (module docstring)
TTFT_LOADED_S = 0.100  # every streamed call, on a loaded machine
SYSTEM = "You are a careful assistant. " * 20  # 580 characters: room for cache hits
MESSAGES: list[Any] = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": "hello"},
]
ANTHROPIC_MESSAGES: list[Any] = [{"role": "user", "content": "hello"}]
CACHED_SYSTEM: list[Any] = [
    {"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}
]
PLAIN_SYSTEM: list[Any] = [{"type": "text", "text": SYSTEM}]  # the same prompt, no breakpoint
INCLUDE_USAGE: Any = {"include_usage": True}


@dataclass
class Recording:
    """One test's shipper, under a service name of its own."""

    cachewatch: Cachewatch
    shipper: Shipper
    service: str

    def rows(self) -> list[UsageRecord]:
        assert self.shipper.flush(10), "the shipper did not deliver within 10 s"
        return self.cachewatch.rows(self.service)


@pytest.fixture
def recording(cachewatch: Cachewatch) -> Iterator[Recording]:
    service = f"app-{uuid.uuid4().hex[:8]}"
    # Settings themselves, not `resolve()`: no CACHEWATCH_* of the environment.
    settings = Settings(cachewatch.url, cachewatch.token, service, flush_interval_s=0.05)
    shipper = Shipper(settings)
    yield Recording(cachewatch, shipper, service)
    shipper.close(5)


@pytest.fixture
def slow(providers: FakeProviders) -> FakeProviders:
    providers.delay_first_byte_s = DELAY_S
    return providers


def oai(fake: FakeProviders, **options: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=fake.openai_base_url, api_key="sk-test", **options)


def aoai(fake: FakeProviders, **options: Any) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=fake.openai_base_url, api_key="sk-test", **options)


def ant(fake: FakeProviders, **options: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=fake.anthropic_base_url, api_key="sk-ant", **options)


def aant(fake: FakeProviders, **options: Any) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=fake.anthropic_base_url, api_key="sk-ant", **options)


def recorded(client: Any, recording: Recording, **labels: Any) -> Any:
    return instrument(client, service=recording.service, shipper=recording.shipper, **labels)


# --- what was served against what was stored ------------------------------------------


def tokens_of(served: Served) -> tuple[int, int, int, int]:
    """(prompt, cached, cache write, completion) tokens of the fake's usage object, as
    contract section 1 derives them."""
    usage = served.usage
    if served.api == "chat":
        details = usage["prompt_tokens_details"]
        return usage["prompt_tokens"], details["cached_tokens"], 0, usage["completion_tokens"]
    if served.api == "responses":
        details = usage["input_tokens_details"]
        return usage["input_tokens"], details["cached_tokens"], 0, usage["output_tokens"]
    read, write = usage["cache_read_input_tokens"], usage["cache_creation_input_tokens"]
    return usage["input_tokens"] + read + write, read, write, usage["output_tokens"]


def packed(hashes: list[str]) -> bytes:
    return b"".join(key_bytes(h) for h in hashes)


def check_row(
    row: UsageRecord, served: Served, *, block_size: int = 128, delay_s: float = 0.0
) -> None:
    """`row` is what `served` answered, measured as the client measures; the fake
    waited `delay_s` before its first byte."""
    assert served.status == 200
    assert row.request_id == served.response_id
    assert row.model == served.body["model"]
    tokens = (row.prompt_tokens, row.cached_tokens, row.cache_write_tokens, row.completion_tokens)
    assert tokens == tokens_of(served), served.usage
    assert row.provider == ("anthropic" if served.api == "messages" else "openai")
    expected = fingerprint(served.body, block_size=block_size)
    assert row.segments == expected["segments"]
    assert row.block_size == block_size
    assert row.block_hashes == packed(expected["block_hashes"])
    assert row.prefix_hash == expected.get("prefix_hash")
    assert row.prefix_tokens == expected.get("prefix_tokens")
    started = row.ts_us / 1e6
    assert row.latency_ms is not None
    assert started + row.latency_ms / 1000 >= served.first_byte - 0.001
    if served.stream:
        assert row.ttft_ms is not None and row.ttft_ms >= delay_s * 1000
        first_token = started + row.ttft_ms / 1000
        # The client's first token follows the fake's first byte (same clock; 1 ms
        # for the stored rounding), within the module docstring's few ms.
        assert -0.001 <= first_token - served.first_byte <= TTFT_LOADED_S, (
            first_token - served.first_byte
        )
        assert row.latency_ms >= row.ttft_ms
    else:
        assert row.ttft_ms is None  # a whole answer's first byte came with its last
        assert row.latency_ms >= delay_s * 1000


def check_all(
    recording: Recording, served: list[Served], *, delay_s: float = 0.0, **labels: Any
) -> list[UsageRecord]:
    """The stored rows are `served`, one for one, with `labels`; in `served`'s order."""
    stored = {row.request_id: row for row in recording.rows()}
    assert sorted(stored) == sorted(s.response_id for s in served)
    rows = [stored[s.response_id] for s in served]
    for row, answer in zip(rows, served, strict=True):
        check_row(row, answer, delay_s=delay_s)
        assert row.service == recording.service
        for name, value in labels.items():
            assert getattr(row, name) == value, name
    gaps = [
        r.ts_us / 1e6 + r.ttft_ms / 1000 - s.first_byte
        for r, s in zip(rows, served, strict=True)
        if s.stream and r.ttft_ms is not None
    ]
    assert not gaps or min(gaps) <= TTFT_SLACK_S, gaps
    return rows


def chat_text(chunks: list[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


# --- OpenAI ---------------------------------------------------------------------------


def test_openai_sync(slow: FakeProviders, recording: Recording) -> None:
    with recorded(oai(slow), recording, deploy="v7") as client:
        completion = client.chat.completions.create(model=MODEL, messages=MESSAGES)
        streamed = list(
            client.chat.completions.create(
                model=MODEL, messages=MESSAGES, stream=True, stream_options=INCLUDE_USAGE
            )
        )
        unmetered = list(
            client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
        )
        response = client.responses.create(model=MODEL, instructions=SYSTEM, input="hello")
        events = list(
            client.responses.create(model=MODEL, instructions=SYSTEM, input="hi", stream=True)
        )
        with client.responses.stream(model=MODEL, instructions=SYSTEM, input="hey") as helper:
            final = helper.get_final_response()
    served = slow.served
    assert len(served) == 6
    # The application's objects are the provider's answers.
    assert completion.id == served[0].response_id
    assert completion.choices[0].message.content == DEFAULT_REPLY
    assert completion.usage is not None
    assert completion.usage.model_dump(exclude_none=True) == served[0].usage
    assert chat_text(streamed) == chat_text(unmetered) == DEFAULT_REPLY
    assert streamed[-1].usage is not None
    assert streamed[-1].usage.model_dump(exclude_none=True) == served[1].usage
    assert all(chunk.usage is None for chunk in unmetered)
    assert response.output_text == final.output_text == DEFAULT_REPLY
    assert events[-1].type == "response.completed"
    assert [response.id, events[-1].response.id, final.id] == [s.response_id for s in served[3:]]

    rows = check_all(
        recording, [s for i, s in enumerate(served) if i != 2], delay_s=DELAY_S, deploy="v7"
    )
    assert rows[1].cached_tokens > 0  # the same prompt again: the fake's cache hit
    # A stream without include_usage carries no usage: skipped, never guessed.
    assert recording.shipper.stats() == ShipperStats(queued=6, sent=5, skipped=1)


@pytest.mark.anyio
async def test_openai_async(slow: FakeProviders, recording: Recording) -> None:
    async with recorded(aoai(slow), recording, deploy="v8") as client:
        completion = await client.chat.completions.create(model=MODEL, messages=MESSAGES)
        stream = await client.chat.completions.create(
            model=MODEL, messages=MESSAGES, stream=True, stream_options=INCLUDE_USAGE
        )
        streamed = [chunk async for chunk in stream]
        bare = await client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
        unmetered = [chunk async for chunk in bare]
        response = await client.responses.create(model=MODEL, instructions=SYSTEM, input="hello")
        raw = await client.responses.create(
            model=MODEL, instructions=SYSTEM, input="hi", stream=True
        )
        events = [event async for event in raw]
        async with client.responses.stream(model=MODEL, instructions=SYSTEM, input="hey") as helper:
            final = await helper.get_final_response()
    served = slow.served
    assert len(served) == 6
    assert completion.choices[0].message.content == DEFAULT_REPLY
    assert completion.usage is not None
    assert completion.usage.model_dump(exclude_none=True) == served[0].usage
    assert chat_text(streamed) == chat_text(unmetered) == DEFAULT_REPLY
    assert streamed[-1].usage is not None
    assert response.output_text == final.output_text == DEFAULT_REPLY
    assert events[-1].type == "response.completed"

    check_all(recording, [s for i, s in enumerate(served) if i != 2], delay_s=DELAY_S, deploy="v8")
    assert recording.shipper.stats() == ShipperStats(queued=6, sent=5, skipped=1)


# --- Anthropic ------------------------------------------------------------------------


def test_anthropic_sync(slow: FakeProviders, recording: Recording) -> None:
    with recorded(ant(slow), recording) as client:
        message = client.messages.create(
            model=MODEL, max_tokens=64, system=CACHED_SYSTEM, messages=ANTHROPIC_MESSAGES
        )
        events = list(
            client.messages.create(
                model=MODEL,
                max_tokens=64,
                system=CACHED_SYSTEM,
                messages=[*ANTHROPIC_MESSAGES, {"role": "assistant", "content": "hi"}],
                stream=True,
            )
        )
        with client.messages.stream(
            model=MODEL, max_tokens=64, system=PLAIN_SYSTEM, messages=ANTHROPIC_MESSAGES
        ) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
    served = slow.served
    assert message.content[0].type == "text" and message.content[0].text == DEFAULT_REPLY
    assert message.usage.model_dump(exclude_none=True) == served[0].usage
    assert events[0].type == "message_start" and events[-1].type == "message_stop"
    assert text == DEFAULT_REPLY and final.id == served[2].response_id
    assert final.usage.model_dump(exclude_none=True) == served[2].usage

    rows = check_all(recording, served, delay_s=DELAY_S, deploy=None)
    # Written, then read, then read without writing (no cache_control).
    assert rows[0].cache_write_tokens > 0 and rows[0].cached_tokens == 0
    assert rows[1].cached_tokens > 0 and rows[2].cached_tokens > 0
    assert rows[2].cache_write_tokens == 0
    assert recording.shipper.stats() == ShipperStats(queued=3, sent=3)


@pytest.mark.anyio
async def test_anthropic_async(slow: FakeProviders, recording: Recording) -> None:
    async with recorded(aant(slow), recording, deploy="v9") as client:
        message = await client.messages.create(
            model=MODEL, max_tokens=64, system=CACHED_SYSTEM, messages=ANTHROPIC_MESSAGES
        )
        raw = await client.messages.create(
            model=MODEL, max_tokens=64, system=CACHED_SYSTEM, messages=ANTHROPIC_MESSAGES,
            stream=True,
        )  # fmt: skip
        events = [event async for event in raw]
        async with client.messages.stream(
            model=MODEL, max_tokens=64, system=SYSTEM, messages=ANTHROPIC_MESSAGES
        ) as stream:
            final = await stream.get_final_message()
    served = slow.served
    assert message.content[0].type == "text" and message.content[0].text == DEFAULT_REPLY
    assert events[-1].type == "message_stop"
    assert final.usage.model_dump(exclude_none=True) == served[2].usage

    rows = check_all(recording, served, delay_s=DELAY_S, deploy="v9")
    assert rows[0].cache_write_tokens > 0 and rows[1].cached_tokens > 0
    assert recording.shipper.stats() == ShipperStats(queued=3, sent=3)


# --- How the SDKs are used ------------------------------------------------------------


def test_with_options_copy_and_raw_responses_are_recorded(
    slow: FakeProviders, recording: Recording
) -> None:
    with recorded(oai(slow), recording) as client:
        client.with_options(timeout=30, max_retries=1).chat.completions.create(
            model=MODEL, messages=MESSAGES
        )
        client.copy(default_headers={"x-app": "1"}).responses.create(model=MODEL, input="hi")
        raw = client.chat.completions.with_raw_response.create(model=MODEL, messages=MESSAGES)
        assert raw.parse().choices[0].message.content == DEFAULT_REPLY
        with client.chat.completions.with_streaming_response.create(
            model=MODEL, messages=MESSAGES, stream=True, stream_options=INCLUDE_USAGE
        ) as answer:
            assert "data: [DONE]" in list(answer.iter_lines())
    with recorded(ant(slow), recording) as client:
        client.with_options(timeout=30).messages.create(
            model=MODEL, max_tokens=8, messages=ANTHROPIC_MESSAGES
        )
        raw_message = client.messages.with_raw_response.create(
            model=MODEL, max_tokens=8, messages=ANTHROPIC_MESSAGES
        )
        assert raw_message.parse().id == slow.served[-1].response_id
    assert slow.served[1].headers["x-app"] == "1"
    check_all(recording, slow.served, delay_s=DELAY_S)


def test_an_sdk_retry_records_one_call(providers: FakeProviders, recording: Recording) -> None:
    with recorded(oai(providers, max_retries=2), recording) as client:
        providers.fail_next(429, 1)
        client.chat.completions.create(model=MODEL, messages=MESSAGES)
        providers.fail_next(500, 2)
        stream = client.chat.completions.create(
            model=MODEL, messages=MESSAGES, stream=True, stream_options=INCLUDE_USAGE
        )
        assert chat_text(list(stream)) == DEFAULT_REPLY
    with recorded(ant(providers, max_retries=2), recording) as client:
        providers.fail_next(529, 1)
        client.messages.create(model=MODEL, max_tokens=8, messages=ANTHROPIC_MESSAGES)
    served = providers.served
    assert [s.status for s in served] == [429, 200, 500, 500, 200, 529, 200]
    rows = recording.rows()
    assert [row.request_id for row in rows] == [served[i].response_id for i in (1, 4, 6)]
    assert recording.shipper.stats() == ShipperStats(queued=3, sent=3)


def test_a_provider_error_raises_as_before_and_records_nothing(
    providers: FakeProviders, recording: Recording
) -> None:
    def failures(client: openai.OpenAI, anthropic_client: anthropic.Anthropic) -> list[Any]:
        caught: list[Any] = []
        for call in (
            lambda: client.chat.completions.create(model=MODEL, messages=MESSAGES),
            lambda: client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True),
            lambda: client.responses.create(model=MODEL, input="hi"),
            lambda: anthropic_client.messages.create(
                model=MODEL, max_tokens=8, messages=ANTHROPIC_MESSAGES
            ),
        ):
            providers.fail_next(400)
            with pytest.raises((openai.BadRequestError, anthropic.BadRequestError)) as raised:
                call()
            caught.append((type(raised.value), raised.value.status_code, raised.value.body))
        return caught

    with oai(providers) as plain, ant(providers) as plain_anthropic:
        expected = failures(plain, plain_anthropic)
    with (
        recorded(oai(providers), recording) as client,
        recorded(ant(providers), recording) as anthropic_client,
    ):
        assert failures(client, anthropic_client) == expected
    assert [s.status for s in providers.served] == [400] * 8
    assert recording.rows() == []
    assert recording.shipper.stats() == ShipperStats()


def test_non_api_requests_pass_through(providers: FakeProviders, recording: Recording) -> None:
    """The fake serves no `GET /v1/models`: its 404 reaches the application as it
    would without the client, and nothing is recorded or counted."""
    with oai(providers) as plain, pytest.raises(openai.NotFoundError) as without:
        plain.models.list()
    with recorded(oai(providers), recording) as client, pytest.raises(openai.NotFoundError) as got:
        client.models.list()
    assert (got.value.status_code, got.value.body) == (
        without.value.status_code,
        without.value.body,
    )
    with recorded(ant(providers), recording) as client, pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model=MODEL, messages=ANTHROPIC_MESSAGES)
    assert recording.rows() == []
    assert recording.shipper.stats() == ShipperStats()


def _scrub(value: Any) -> Any:
    """An answer without what differs between two identical calls: ids (the fake
    numbers them) and creation times."""
    text = re.sub(r"(chatcmpl-|resp_|msg_)\d+", r"\1N", json.dumps(value, sort_keys=True))

    def drop(item: Any) -> Any:
        if isinstance(item, dict):
            return {k: drop(v) for k, v in item.items() if k not in ("created", "created_at")}
        if isinstance(item, list):
            return [drop(v) for v in item]
        return item

    return drop(json.loads(text))


def _every_kind_of_call(client: openai.OpenAI, anthropic_client: anthropic.Anthropic) -> Any:
    out: list[Any] = [client.chat.completions.create(model=MODEL, messages=MESSAGES).model_dump()]
    stream = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, stream=True, stream_options=INCLUDE_USAGE
    )
    out.append([chunk.model_dump() for chunk in stream])
    out.append(client.responses.create(model=MODEL, input="hi").model_dump())
    events = client.responses.create(model=MODEL, input="hi", stream=True)
    out.append([event.model_dump() for event in events])
    out.append(
        anthropic_client.messages.create(
            model=MODEL, max_tokens=8, system=CACHED_SYSTEM, messages=ANTHROPIC_MESSAGES
        ).model_dump()
    )
    with anthropic_client.messages.stream(
        model=MODEL, max_tokens=8, system=CACHED_SYSTEM, messages=ANTHROPIC_MESSAGES
    ) as helper:
        out.append([event.model_dump() for event in helper])
        out.append(helper.get_final_message().model_dump())
    return _scrub(out)


def test_the_application_sees_what_it_would_without(
    providers: FakeProviders, recording: Recording
) -> None:
    with oai(providers) as plain, ant(providers) as plain_anthropic:
        expected = _every_kind_of_call(plain, plain_anthropic)
    before = providers.served
    providers.reset()  # the same cache state: the same usage
    with (
        recorded(oai(providers), recording) as client,
        recorded(ant(providers), recording) as anthropic_client,
    ):
        assert _every_kind_of_call(client, anthropic_client) == expected
    after = providers.served
    assert [s.body for s in after] == [s.body for s in before]
    # The request is the SDK's own; only Accept-Encoding asks for what the client
    # can decode (module `transport`).
    for old, new in zip(before, after, strict=True):
        assert new.headers["accept-encoding"] == "gzip, deflate"
        assert {k: v for k, v in new.headers.items() if k != "accept-encoding"} == {
            k: v for k, v in old.headers.items() if k != "accept-encoding"
        }
    check_all(recording, after)


# --- Labels ---------------------------------------------------------------------------


def test_labels_and_their_precedence(providers: FakeProviders, recording: Recording) -> None:
    with recorded(oai(providers), recording) as client, recorded(ant(providers), recording) as a:
        with cachewatch_client.session("conv", tenant="t", attributes={"step": 1}):
            client.chat.completions.create(  # the block wins over the request's fields
                model=MODEL, messages=MESSAGES, prompt_cache_key="pck", user="u"
            )
            with cachewatch_client.session(scenario="triage", attributes={"inner": True}):
                a.messages.create(  # nested: adds to the outer block
                    model=MODEL, max_tokens=8, messages=ANTHROPIC_MESSAGES,
                    metadata={"user_id": "cust-1"},
                )  # fmt: skip
        client.chat.completions.create(  # no block: the request's own fields
            model=MODEL,
            messages=MESSAGES,
            prompt_cache_key="pck2",
            safety_identifier="si",
            user="u",
            prompt_cache_retention="24h",
        )
        client.responses.create(model=MODEL, input="hi", user="u2")
        a.messages.create(
            model=MODEL, max_tokens=8, messages=ANTHROPIC_MESSAGES, metadata={"user_id": "cust-2"}
        )
        client.chat.completions.create(model=MODEL, messages=MESSAGES)  # nothing at all
    labelled = instrument(
        oai(providers),
        service=recording.service,
        shipper=recording.shipper,
        session_id="fixed",
        tenant="inst",
        attributes={"client": "x"},
    )
    with labelled, cachewatch_client.session("conv", tenant="t", scenario="s"):
        labelled.chat.completions.create(model=MODEL, messages=MESSAGES, prompt_cache_key="k")
    rows = check_all(recording, providers.served)
    got = [
        (r.session_id, r.tenant, r.cache_key, r.scenario, r.cache_ttl_s, r.attributes) for r in rows
    ]
    assert got == [
        ("conv", "t", "pck", None, None, {"step": 1}),
        ("conv", "t", None, "triage", None, {"step": 1, "inner": True}),
        ("pck2", "si", "pck2", None, 86_400, None),
        (None, "u2", None, None, None, None),
        (None, "cust-2", None, None, None, None),
        (None, None, None, None, None, None),
        # instrument()'s own labels win over the block; the block fills the rest.
        ("fixed", "inst", "k", "s", None, {"client": "x"}),
    ]


def test_a_block_deploy_beats_the_settings_default(
    providers: FakeProviders, cachewatch: Cachewatch
) -> None:
    """`CACHEWATCH_DEPLOY` (here `Settings.deploy`) is a default: a `session()`
    block's deploy wins over it, as `instrument(deploy=...)` wins over the block."""
    service = f"deploy-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        cachewatch.url, cachewatch.token, service, deploy="from-env", flush_interval_s=0.05
    )
    shipper = Shipper(settings)
    try:
        with instrument(oai(providers), shipper=shipper) as client:
            with cachewatch_client.session(deploy="canary"):
                client.chat.completions.create(model=MODEL, messages=MESSAGES)
            client.chat.completions.create(model=MODEL, messages=MESSAGES)
        with (
            instrument(oai(providers), shipper=shipper, deploy="given") as client,
            cachewatch_client.session(deploy="canary"),
        ):
            client.chat.completions.create(model=MODEL, messages=MESSAGES)
        now = time.time()
        with cachewatch_client.session(deploy="canary"):
            cachewatch_client.record(
                {"model": MODEL, "messages": MESSAGES},
                {"prompt_tokens": 10, "completion_tokens": 1},
                started=now,
                request_id=f"manual-{service}",
                shipper=shipper,
            )
        assert shipper.flush(10)
        rows = cachewatch.rows(service)
    finally:
        shipper.close(5)
    assert [(r.service, r.deploy) for r in rows] == [
        (service, "canary"),
        (service, "from-env"),
        (service, "given"),
        (service, "canary"),
    ]


@pytest.mark.anyio
async def test_async_labels_follow_the_task(providers: FakeProviders, recording: Recording) -> None:
    providers.chunk_gap_s = 0.005  # the two tasks' streams interleave

    async def conversation(client: openai.AsyncOpenAI, n: int) -> None:
        with cachewatch_client.session(f"async-{n}", tenant=f"t{n}"):
            stream = await client.chat.completions.create(
                model=MODEL, messages=MESSAGES, stream=True, stream_options=INCLUDE_USAGE
            )
        # Read after the block: the labels are those in force when the call started.
        assert chat_text([chunk async for chunk in stream]) == DEFAULT_REPLY

    async with recorded(aoai(providers), recording) as client:
        await asyncio.gather(conversation(client, 1), conversation(client, 2))
        await client.chat.completions.create(model=MODEL, messages=MESSAGES)
    rows = check_all(recording, providers.served)
    labels = sorted((r.session_id, r.tenant) for r in rows[:2])
    assert labels == [("async-1", "t1"), ("async-2", "t2")]
    assert (rows[2].session_id, rows[2].tenant) == (None, None)


def test_threads_keep_their_own_labels(providers: FakeProviders, recording: Recording) -> None:
    providers.chunk_gap_s = 0.005

    def conversation(client: openai.OpenAI, n: int) -> str:
        with cachewatch_client.session(f"thread-{n}", tenant=f"t{n}"):
            stream = client.chat.completions.create(
                model=MODEL, messages=MESSAGES, stream=True, stream_options=INCLUDE_USAGE
            )
            return chat_text(list(stream))

    with recorded(oai(providers), recording) as client, ThreadPoolExecutor(4) as pool:
        texts = list(pool.map(lambda n: conversation(client, n), range(4)))
    assert texts == [DEFAULT_REPLY] * 4
    rows = check_all(recording, providers.served)
    by_id = {s.response_id: s for s in providers.served}
    assert sorted((r.session_id, r.tenant) for r in rows) == [
        (f"thread-{n}", f"t{n}") for n in range(4)
    ]
    assert all(by_id[r.request_id].stream for r in rows)


# --- Fingerprints: the same as `cachewatch diff`'s ------------------------------------


def diff(tmp_path: Path, a: Served, b: Served) -> dict[str, Any]:
    """`cachewatch diff A.json B.json --json` on the bodies the fake received."""
    files = []
    for name, served in (("a", a), ("b", b)):
        path = tmp_path / f"{name}-{served.response_id}.json"
        path.write_text(json.dumps(served.body))
        files.append(str(path))
    script = Path(sys.executable).with_name("cachewatch")
    env = {"PATH": "/usr/bin:/bin"}
    if script.exists():
        done = subprocess.run(
            [str(script), "diff", *files, "--json"], env=env, capture_output=True, text=True
        )
    else:  # pragma: no cover - an install without the console script
        done = run_cachewatch(env, "diff", *files, "--json")
    assert done.returncode in (0, 1), done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    assert result["diverged"] == (done.returncode == 1)
    return result


def test_fingerprints_equal_cachewatch_diff(
    providers: FakeProviders, recording: Recording, tmp_path: Path
) -> None:
    tools: Any = [
        {"type": "function", "function": {"name": f"tool_{i}", "parameters": {}}} for i in range(3)
    ]
    first = [
        {"role": "system", "content": "Now: 10:31:07. " + SYSTEM},
        {"role": "user", "content": "hi"},
    ]
    second = [
        *first,
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "more"},
    ]
    moved = [{"role": "system", "content": "Now: 10:32:44. " + SYSTEM}, *second[1:]]
    with recorded(oai(providers), recording, block_size=16) as client:
        for messages in (first, second, moved):
            client.chat.completions.create(model=MODEL, messages=messages, tools=tools)
    a, b, c = served = providers.served
    rows = recording.rows()
    assert [r.request_id for r in rows] == [s.response_id for s in served]
    for row, answer in zip(rows, served, strict=True):
        check_row(row, answer, block_size=16)
    ra, rb, rc = (r.segments or [] for r in rows)

    extended = diff(tmp_path, a, b)  # B is A with a turn appended: nothing diverges
    assert not extended["diverged"]
    assert [s["name"] for s in rb] == ["tools", "system", "message[0]", "message[1]", "message[2]"]
    assert rb[: len(ra)] == ra
    assert rows[0].prefix_hash == rows[1].prefix_hash
    # A's whole blocks begin B: A's serialization is a prefix of B's.
    blocks_a, blocks_b, blocks_c = (r.block_hashes or b"" for r in rows)
    full = len(blocks_a) // 8 - 1  # A's last block is partial
    assert full > 2 and blocks_b[: 8 * full] == blocks_a[: 8 * full]

    moved_clock = diff(tmp_path, b, c)  # the clock in the system prompt moved
    assert moved_clock["diverged"]
    index = moved_clock["part_index"]
    assert (moved_clock["part"], moved_clock["part_b"], index) == ("system", "system", 1)
    assert rb[index]["name"] == rc[index]["name"] == moved_clock["part"]
    assert [s["hash"] for s in rb[:index]] == [s["hash"] for s in rc[:index]]
    assert rb[index]["hash"] != rc[index]["hash"]
    assert moved_clock["rendering"] is None  # content, not rendering: both hashes differ
    assert rb[index]["norm_hash"] != rc[index]["norm_hash"]
    assert rb[index + 1 :] == rc[index + 1 :]  # the conversation after it is the same
    assert rows[1].prefix_hash != rows[2].prefix_hash
    # `shared_tokens` counts the bytes before the difference; segments round each
    # part's bytes up to whole tokens.
    before = sum(s["tokens"] for s in rb[:index])
    assert before - index <= moved_clock["shared_tokens"] < before + rb[index]["tokens"]
    shared_blocks = next(
        i for i in range(0, len(blocks_b), 8) if blocks_b[i : i + 8] != blocks_c[i : i + 8]
    )
    assert shared_blocks // 8 == moved_clock["shared_tokens"] // 16
