"""The fake providers against the real `openai` and `anthropic` SDKs."""

import time
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.client.fake_providers import DEFAULT_REPLY, FakeProviders, Served, prompt_text
from tests.conftest import is_postgres_run

pytestmark = pytest.mark.skipif(is_postgres_run(), reason="touches no database: run once")

MODEL = "fake-model"
LONG = "You are a careful assistant. " * 20  # 580 characters: room for cache hits
MESSAGES: list[Any] = [
    {"role": "system", "content": LONG},
    {"role": "user", "content": "hello"},
]
ANTHROPIC_MESSAGES: list[Any] = [{"role": "user", "content": "hello"}]


@pytest.fixture
def oai(providers: FakeProviders) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=providers.openai_base_url, api_key="sk-test") as client:
        yield client


def aoai(fake: FakeProviders) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=fake.openai_base_url, api_key="sk-test")


@pytest.fixture
def ant(providers: FakeProviders) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=providers.anthropic_base_url, api_key="sk-ant") as client:
        yield client


def aant(fake: FakeProviders) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=fake.anthropic_base_url, api_key="sk-ant")


def only(fake: FakeProviders) -> Served:
    (served,) = fake.served
    return served


def prompt_tokens(body: dict[str, Any]) -> int:
    return len(prompt_text(body)) // 4


# --- OpenAI Chat Completions ------------------------------------------------------------


def test_chat_completion(providers: FakeProviders, oai: openai.OpenAI) -> None:
    completion = oai.chat.completions.create(model=MODEL, messages=MESSAGES)
    served = only(providers)
    assert completion.id == served.response_id and completion.id.startswith("chatcmpl-")
    assert completion.model == MODEL
    assert completion.choices[0].message.content == DEFAULT_REPLY
    assert completion.usage is not None
    assert completion.usage.model_dump(exclude_none=True) == served.usage
    assert completion.usage.prompt_tokens == prompt_tokens({"messages": MESSAGES}) > 0
    assert completion.usage.prompt_tokens_details is not None
    assert completion.usage.prompt_tokens_details.cached_tokens == 0
    assert served.api == "chat" and not served.stream and served.status == 200
    assert served.headers["authorization"] == "Bearer sk-test"
    assert served.body["messages"] == MESSAGES


def test_chat_stream_with_usage(providers: FakeProviders, oai: openai.OpenAI) -> None:
    stream = oai.chat.completions.create(
        model=MODEL, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == DEFAULT_REPLY
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert len(chunks) > 4 and chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.model_dump(exclude_none=True) == only(providers).usage
    assert only(providers).stream


def test_chat_stream_without_usage(providers: FakeProviders, oai: openai.OpenAI) -> None:
    chunks = list(oai.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True))
    assert all(c.usage is None and c.choices for c in chunks)


@pytest.mark.anyio
async def test_async_chat(providers: FakeProviders) -> None:
    async with aoai(providers) as client:
        await chat_twice(client)


async def chat_twice(client: openai.AsyncOpenAI) -> None:
    completion = await client.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert completion.choices[0].message.content == DEFAULT_REPLY
    stream = await client.chat.completions.create(
        model=MODEL, messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    chunks = [chunk async for chunk in stream]
    assert chunks[-1].usage is not None
    details = chunks[-1].usage.prompt_tokens_details
    assert details is not None and (details.cached_tokens or 0) > 0  # same prompt again


# --- OpenAI Responses -------------------------------------------------------------------


def test_responses(providers: FakeProviders, oai: openai.OpenAI) -> None:
    response = oai.responses.create(model=MODEL, instructions=LONG, input="hello")
    served = only(providers)
    assert response.id == served.response_id and response.id.startswith("resp_")
    assert response.status == "completed" and response.output_text == DEFAULT_REPLY
    assert response.usage is not None
    assert response.usage.model_dump(exclude_none=True) == served.usage
    assert response.usage.input_tokens == prompt_tokens({"instructions": LONG, "input": "hello"})
    assert response.usage.input_tokens_details.cached_tokens == 0


def test_responses_stream(providers: FakeProviders, oai: openai.OpenAI) -> None:
    events = list(oai.responses.create(model=MODEL, input="hello", stream=True))
    types = [event.type for event in events]
    assert types[0] == "response.created" and types[-1] == "response.completed"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert len(deltas) > 2 and "".join(deltas) == DEFAULT_REPLY
    completed = events[-1]
    assert completed.type == "response.completed" and completed.response.usage is not None
    assert completed.response.usage.model_dump(exclude_none=True) == providers.served[0].usage
    with oai.responses.stream(model=MODEL, input="hello") as helper:
        final = helper.get_final_response()
    assert final.output_text == DEFAULT_REPLY and final.usage is not None


@pytest.mark.anyio
async def test_async_responses(providers: FakeProviders) -> None:
    async with aoai(providers) as client:
        await responses_twice(client)


async def responses_twice(client: openai.AsyncOpenAI) -> None:
    response = await client.responses.create(model=MODEL, input="hello")
    assert response.output_text == DEFAULT_REPLY
    stream = await client.responses.create(model=MODEL, input="hello", stream=True)
    events = [event async for event in stream]
    assert events[-1].type == "response.completed"


# --- Anthropic Messages -----------------------------------------------------------------


def test_messages(providers: FakeProviders, ant: anthropic.Anthropic) -> None:
    message = ant.messages.create(
        model=MODEL, max_tokens=64, system=LONG, messages=ANTHROPIC_MESSAGES
    )
    served = only(providers)
    assert message.id == served.response_id and message.id.startswith("msg_")
    assert message.content[0].type == "text" and message.content[0].text == DEFAULT_REPLY
    assert message.stop_reason == "end_turn"
    assert message.usage.model_dump(exclude_none=True) == served.usage
    assert message.usage.input_tokens == prompt_tokens(
        {"system": LONG, "messages": ANTHROPIC_MESSAGES}
    )
    assert message.usage.cache_read_input_tokens == message.usage.cache_creation_input_tokens == 0
    assert "sk-ant" in served.headers.get("x-api-key", served.headers.get("authorization", ""))
    assert "anthropic-version" in served.headers


def test_messages_raw_stream(providers: FakeProviders, ant: anthropic.Anthropic) -> None:
    stream = ant.messages.create(
        model=MODEL, max_tokens=64, messages=ANTHROPIC_MESSAGES, stream=True
    )
    events = list(stream)
    types = [event.type for event in events]
    assert types[0] == "message_start" and types[-1] == "message_stop"
    assert types.count("content_block_delta") > 2
    start, delta = events[0], events[-2]
    assert start.type == "message_start" and start.message.usage.output_tokens == 1
    assert delta.type == "message_delta" and delta.delta.stop_reason == "end_turn"
    assert delta.usage.output_tokens == only(providers).usage["output_tokens"]


def test_messages_stream_helper(providers: FakeProviders, ant: anthropic.Anthropic) -> None:
    with ant.messages.stream(
        model=MODEL, max_tokens=64, system=LONG, messages=ANTHROPIC_MESSAGES
    ) as stream:
        assert "".join(stream.text_stream) == DEFAULT_REPLY
        final = stream.get_final_message()
    assert final.usage.model_dump(exclude_none=True) == only(providers).usage
    assert final.stop_reason == "end_turn"


@pytest.mark.anyio
async def test_async_messages(providers: FakeProviders) -> None:
    async with aant(providers) as client:
        await messages_thrice(client)


async def messages_thrice(client: anthropic.AsyncAnthropic) -> None:
    message = await client.messages.create(model=MODEL, max_tokens=64, messages=ANTHROPIC_MESSAGES)
    assert message.content[0].type == "text" and message.content[0].text == DEFAULT_REPLY
    raw = await client.messages.create(
        model=MODEL, max_tokens=64, messages=ANTHROPIC_MESSAGES, stream=True
    )
    assert [event.type async for event in raw][-1] == "message_stop"
    async with client.messages.stream(
        model=MODEL, max_tokens=64, messages=ANTHROPIC_MESSAGES
    ) as stream:
        final = await stream.get_final_message()
    assert final.usage.output_tokens == message.usage.output_tokens


# --- The cached-token rule --------------------------------------------------------------


def test_openai_cached_tokens_share_a_prefix(providers: FakeProviders, oai: openai.OpenAI) -> None:
    first = oai.chat.completions.create(model=MODEL, messages=MESSAGES)
    longer = [*MESSAGES, {"role": "assistant", "content": "hi"}, {"role": "user", "content": "?"}]
    second = oai.chat.completions.create(model=MODEL, messages=longer)
    other_model = oai.chat.completions.create(model="other", messages=longer)
    assert first.usage and second.usage and other_model.usage
    common = len(prompt_text({"messages": MESSAGES})) - 2  # up to the closing `]]`
    expected = common // 4 // 16 * 16
    assert second.usage.prompt_tokens_details is not None
    assert second.usage.prompt_tokens_details.cached_tokens == expected > 0
    assert second.usage.prompt_tokens > first.usage.prompt_tokens
    assert other_model.usage.prompt_tokens_details is not None
    assert other_model.usage.prompt_tokens_details.cached_tokens == 0


def test_anthropic_cache_read_and_write(providers: FakeProviders, ant: anthropic.Anthropic) -> None:
    system: Any = [{"type": "text", "text": LONG, "cache_control": {"type": "ephemeral"}}]
    first = ant.messages.create(
        model=MODEL, max_tokens=64, system=system, messages=ANTHROPIC_MESSAGES
    )
    more = [*ANTHROPIC_MESSAGES, {"role": "assistant", "content": "hi"}]
    second = ant.messages.create(model=MODEL, max_tokens=64, system=system, messages=more)
    third = ant.messages.create(model=MODEL, max_tokens=64, system=LONG, messages=more)
    prompt_1 = prompt_tokens({"system": system, "messages": ANTHROPIC_MESSAGES})
    assert (first.usage.input_tokens, first.usage.cache_read_input_tokens) == (0, 0)
    assert first.usage.cache_creation_input_tokens == prompt_1
    read = second.usage.cache_read_input_tokens
    assert read is not None and read > 0 and read % 16 == 0
    assert second.usage.input_tokens == 0
    assert read + (second.usage.cache_creation_input_tokens or 0) == prompt_tokens(
        {"system": system, "messages": more}
    )
    assert third.usage.cache_creation_input_tokens == 0  # no cache_control: nothing written
    assert third.usage.input_tokens > 0


# --- Controls ---------------------------------------------------------------------------


def test_delay_first_byte(
    providers: FakeProviders, oai: openai.OpenAI, ant: anthropic.Anthropic
) -> None:
    providers.delay_first_byte_s = 0.3
    providers.chunk_gap_s = 0.02
    sent = time.time()
    stream = oai.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)
    first_chunk = next(iter(stream))
    got_first = time.time()
    rest = list(stream)
    done = time.time()
    assert first_chunk.choices[0].delta.role == "assistant" and rest
    served = only(providers)
    assert 0.3 <= served.first_byte - sent < got_first - sent + 0.05
    assert got_first - sent >= 0.3
    assert done - got_first >= 0.02 * len(rest)
    start = time.time()
    ant.messages.create(model=MODEL, max_tokens=8, messages=ANTHROPIC_MESSAGES)
    assert time.time() - start >= 0.3 and providers.served[1].first_byte - start >= 0.3


def test_fail_next_with_sdk_retries(
    providers: FakeProviders, oai: openai.OpenAI, ant: anthropic.Anthropic
) -> None:
    providers.fail_next(429, 2)
    completion = oai.with_options(max_retries=2).chat.completions.create(
        model=MODEL, messages=MESSAGES
    )
    assert completion.choices[0].message.content == DEFAULT_REPLY
    assert [s.status for s in providers.served] == [429, 429, 200]
    providers.fail_next(529, 3)
    with pytest.raises(anthropic.InternalServerError) as raised:
        ant.with_options(max_retries=2).messages.create(
            model=MODEL, max_tokens=8, messages=ANTHROPIC_MESSAGES
        )
    assert raised.value.status_code == 529
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["error"]["type"] == "overloaded_error"
    providers.fail_next(500)
    with pytest.raises(openai.InternalServerError):
        oai.with_options(max_retries=0).responses.create(model=MODEL, input="hi")
    assert [s.status for s in providers.served][3:] == [529, 529, 529, 500]


def test_reset_forgets_prompts(providers: FakeProviders, oai: openai.OpenAI) -> None:
    oai.chat.completions.create(model=MODEL, messages=MESSAGES)
    providers.reset()
    again = oai.chat.completions.create(model=MODEL, messages=MESSAGES)
    assert again.usage and again.usage.prompt_tokens_details
    assert again.usage.prompt_tokens_details.cached_tokens == 0
    assert len(providers.served) == 1
