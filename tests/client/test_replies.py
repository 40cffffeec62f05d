"""What a provider answered, reduced to a `Reply` (cachewatch_client.replies): the
server-sent events split anywhere, the three APIs' streams and bodies, SDK objects,
content encodings and which requests are recorded at all."""

from __future__ import annotations

import gzip
import json
import time
import zlib
from typing import Any

import anthropic.types
import pytest
from google.genai import types as genai_types
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletion

from cachewatch_client.replies import (
    Decoder,
    Reply,
    SseUsage,
    api_of,
    reply_of_body,
    reply_of_events,
    reply_of_object,
)
from tests.conftest import is_postgres_run

pytestmark = pytest.mark.skipif(is_postgres_run(), reason="touches no database: run once")

CHAT_USAGE: dict[str, Any] = {
    "prompt_tokens": 100,
    "completion_tokens": 2,
    "total_tokens": 102,
    "prompt_tokens_details": {"cached_tokens": 64},
}
RESPONSES_USAGE: dict[str, Any] = {
    "input_tokens": 50,
    "input_tokens_details": {"cached_tokens": 32},
    "output_tokens": 3,
    "total_tokens": 53,
}


def sse(*events: tuple[str | None, Any]) -> bytes:
    """A stream of (event name, data) as a server sends it: `\\n` line ends."""
    out = b""
    for name, data in events:
        if name is not None:
            out += f"event: {name}\n".encode()
        text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
        out += f"data: {text}\n\n".encode()
    return out


def chat_chunk(content: str | None, usage: dict[str, Any] | None) -> dict[str, Any]:
    choices = [] if content is None else [{"index": 0, "delta": {"content": content}}]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "gpt-x",
        "choices": choices,
        "usage": usage,
    }


# include_usage: every chunk says "usage": null, the last one carries it.
CHAT_STREAM = sse(
    (None, chat_chunk("Hel", None)),
    (None, chat_chunk("lo", None)),
    (None, chat_chunk(None, CHAT_USAGE)),
    (None, "[DONE]"),
)
# Without include_usage: no event mentions usage at all.
CHAT_STREAM_NO_USAGE = sse(
    (None, {"id": "chatcmpl-2", "model": "gpt-x", "choices": [{"delta": {"content": "Hi"}}]}),
    (None, "[DONE]"),
)
RESPONSES_STREAM = sse(
    (
        "response.created",
        {"type": "response.created", "response": {"id": "resp_1", "model": "gpt-x", "usage": None}},
    ),
    ("response.output_text.delta", {"type": "response.output_text.delta", "delta": "Hi"}),
    (
        "response.completed",
        {
            "type": "response.completed",
            "response": {"id": "resp_1", "model": "gpt-x", "usage": RESPONSES_USAGE},
        },
    ),
)
MESSAGES_STREAM = sse(
    (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "type": "message",
                "model": "claude-x",
                "content": [],
                "usage": {
                    "input_tokens": 10,
                    "cache_read_input_tokens": 200,
                    "cache_creation_input_tokens": 30,
                    "output_tokens": 1,
                },
            },
        },
    ),
    ("ping", {"type": "ping"}),
    (
        "content_block_delta",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
    ),
    (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 15, "input_tokens": None, "cache_read_input_tokens": None},
        },
    ),
    ("message_stop", {"type": "message_stop"}),
)
STREAMS = {"chat": CHAT_STREAM, "responses": RESPONSES_STREAM, "messages": MESSAGES_STREAM}
EXPECTED = {
    "chat": Reply("chatcmpl-1", "gpt-x", CHAT_USAGE),
    "responses": Reply("resp_1", "gpt-x", RESPONSES_USAGE),
    "messages": Reply(
        "msg_1",
        "claude-x",
        {
            "input_tokens": 10,
            "cache_read_input_tokens": 200,
            "cache_creation_input_tokens": 30,
            "output_tokens": 15,
        },
    ),
}


def kept(*chunks: bytes) -> list[bytes]:
    usage = SseUsage()
    for chunk in chunks:
        usage.feed(chunk)
    usage.close()
    return usage.events


def crlf(stream: bytes) -> bytes:
    return stream.replace(b"\n", b"\r\n")


# --- SseUsage ---------------------------------------------------------------------------


@pytest.mark.parametrize("api", list(STREAMS))
def test_sse_keeps_only_the_events_that_mention_usage(api: str) -> None:
    events = kept(STREAMS[api])
    assert events and all(b'"usage"' in data for data in events)
    dropped = (b"[DONE]", b'"ping"', b"content_block_delta", b"message_stop", b"output_text")
    assert not any(word in data for data in events for word in dropped)
    assert reply_of_events(api, events) == EXPECTED[api]


def test_sse_null_usage_is_not_kept() -> None:
    """With include_usage every chat chunk says `"usage": null`: only the last one,
    which carries it, is kept (a handful of events a stream, not every chunk)."""
    assert kept(CHAT_STREAM) == [
        json.dumps(chat_chunk(None, CHAT_USAGE), separators=(",", ":")).encode()
    ]
    assert len(kept(RESPONSES_STREAM)) == 1  # response.created's usage is null
    spaced = (
        b'data: {"id": "c", "usage" :  null}\n\n'
        b'data: {"id": "c", "usage": {"prompt_tokens": 3}}\n\n'
    )
    assert kept(spaced) == [b'{"id": "c", "usage": {"prompt_tokens": 3}}']
    # A null usage beside a real one (a response and its usage, say) is kept.
    both = b'data: {"response": {"usage": null}, "usage": {"prompt_tokens": 1}}\n\n'
    assert len(kept(both)) == 1


def test_sse_kept_events_are_the_data_lines() -> None:
    assert kept(MESSAGES_STREAM) == [
        json.dumps(json.loads(line[6:]), separators=(",", ":")).encode()
        for line in MESSAGES_STREAM.split(b"\n")
        if line.startswith(b"data: ") and b'"usage"' in line
    ]
    assert kept(CHAT_STREAM_NO_USAGE) == []


@pytest.mark.parametrize("api", list(STREAMS))
@pytest.mark.parametrize("line_end", ["\n", "\r\n"])
def test_sse_split_at_every_byte_boundary(api: str, line_end: str) -> None:
    stream = STREAMS[api] if line_end == "\n" else crlf(STREAMS[api])
    whole = kept(STREAMS[api])
    for cut in range(len(stream) + 1):
        assert kept(stream[:cut], stream[cut:]) == whole, cut


@pytest.mark.parametrize("api", list(STREAMS))
def test_sse_fed_one_byte_at_a_time(api: str) -> None:
    for stream in (STREAMS[api], crlf(STREAMS[api])):
        events = kept(*(stream[i : i + 1] for i in range(len(stream))))
        assert reply_of_events(api, events) == EXPECTED[api]


@settings(max_examples=150, deadline=None)
@given(
    api=st.sampled_from(sorted(STREAMS)),
    cuts=st.lists(st.integers(min_value=0, max_value=2_000), max_size=12),
    windows=st.booleans(),
)
def test_sse_split_anywhere(api: str, cuts: list[int], windows: bool) -> None:
    stream = crlf(STREAMS[api]) if windows else STREAMS[api]
    points = sorted({min(c, len(stream)) for c in cuts})
    chunks = [stream[a:b] for a, b in zip([0, *points], [*points, len(stream)], strict=True)]
    assert b"".join(chunks) == stream
    assert reply_of_events(api, kept(*chunks)) == EXPECTED[api]


def test_sse_last_event_without_blank_line_is_kept_on_close() -> None:
    stream = CHAT_STREAM.replace(b"data: [DONE]\n\n", b"").rstrip(b"\n")
    usage = SseUsage()
    usage.feed(stream)
    assert usage.events == []  # the usage chunk waits for its blank line...
    usage.close()
    assert len(usage.events) == 1
    assert reply_of_events("chat", usage.events) == EXPECTED["chat"]  # ...or the close


def test_sse_data_forms() -> None:
    # No space after "data:", a comment line, a data field over two lines.
    stream = (
        b': keep-alive "usage"\n\n'
        b'event: x\ndata:{"usage":{"prompt_tokens":1}}\n\n'
        b'data: {"id": "a",\ndata: "usage": {"prompt_tokens": 2}}\n\n'
        b"event: usage\n\n"
    )
    assert kept(stream) == [
        b'{"usage":{"prompt_tokens":1}}',
        b'{"id": "a",\n"usage": {"prompt_tokens": 2}}',
    ]
    assert reply_of_events("chat", kept(stream)) == Reply("a", None, {"prompt_tokens": 2})


# --- reply_of_events ------------------------------------------------------------------


def test_chat_events_take_the_last_usage() -> None:
    later = dict(CHAT_USAGE, prompt_tokens=101)
    events = [
        json.dumps(chat_chunk("a", None)).encode(),
        json.dumps(chat_chunk(None, CHAT_USAGE)).encode(),
        json.dumps({**chat_chunk(None, later), "id": "chatcmpl-other"}).encode(),
        b"not json",
        b"[1, 2]",
    ]
    assert reply_of_events("chat", events) == Reply("chatcmpl-other", "gpt-x", later)
    assert reply_of_events("chat", events[:1]) == Reply("chatcmpl-1", "gpt-x", None)
    assert reply_of_events("chat", []) == Reply(None, None, None)


def test_responses_events() -> None:
    created = {"type": "response.created", "response": {"id": "resp_9", "model": "gpt-x"}}
    incomplete = {
        "type": "response.incomplete",
        "response": {"id": "resp_9", "model": "gpt-x", "usage": RESPONSES_USAGE},
    }
    other = {"type": "error", "usage": {"input_tokens": 1}}
    events = [json.dumps(e).encode() for e in (created, other, incomplete)]
    assert reply_of_events("responses", events) == Reply("resp_9", "gpt-x", RESPONSES_USAGE)
    assert reply_of_events("responses", events[:2]) == Reply("resp_9", "gpt-x", None)


def test_messages_events_merge_later_non_null_wins() -> None:
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_2",
            "model": "claude-x",
            "usage": {"input_tokens": 5, "cache_read_input_tokens": 0, "output_tokens": 1},
        },
    }
    # Newer API versions repeat the input side in message_delta: its values win.
    delta = {
        "type": "message_delta",
        "usage": {"output_tokens": 9, "cache_read_input_tokens": 300, "input_tokens": None},
    }
    last = {"type": "message_delta", "usage": {"output_tokens": 12}}
    events = [json.dumps(e).encode() for e in (start, delta, last)]
    assert reply_of_events("messages", events) == Reply(
        "msg_2",
        "claude-x",
        {"input_tokens": 5, "cache_read_input_tokens": 300, "output_tokens": 12},
    )
    # A message_delta alone (the start was lost) still gives its counts.
    assert reply_of_events("messages", events[2:]) == Reply(None, None, {"output_tokens": 12})


# --- reply_of_body, reply_of_object ---------------------------------------------------


def test_reply_of_body() -> None:
    body = {"id": "chatcmpl-3", "model": "gpt-x", "choices": [], "usage": CHAT_USAGE}
    assert reply_of_body(json.dumps(body).encode()) == Reply("chatcmpl-3", "gpt-x", CHAT_USAGE)
    message = {"id": "msg_3", "type": "message", "model": "claude-x", "usage": {"input_tokens": 4}}
    assert reply_of_body(json.dumps(message).encode()).usage == {"input_tokens": 4}
    assert reply_of_body(b"[]") == Reply(None, None, None)
    assert reply_of_body(b'{"id": "x", "usage": null}') == Reply("x", None, None)
    with pytest.raises(ValueError):
        reply_of_body(b"{not json")


def test_reply_of_an_openai_sdk_object() -> None:
    completion = ChatCompletion.model_validate(
        {
            "id": "chatcmpl-4",
            "object": "chat.completion",
            "created": 1,
            "model": "gpt-x",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "hi"},
                }
            ],
            "usage": CHAT_USAGE,
        }
    )
    assert reply_of_object(completion) == Reply("chatcmpl-4", "gpt-x", CHAT_USAGE)
    # Its bare usage object, as the SDK gives it.
    usage = CompletionUsage.model_validate(CHAT_USAGE)
    assert reply_of_object(usage) == Reply(None, None, CHAT_USAGE)
    # An answer without usage (an engine that sends none): nothing to record.
    bare = completion.model_copy(update={"usage": None})
    assert reply_of_object(bare) == Reply("chatcmpl-4", "gpt-x", None)


def test_reply_of_an_anthropic_sdk_object() -> None:
    usage = {
        "input_tokens": 10,
        "cache_read_input_tokens": 200,
        "cache_creation_input_tokens": 30,
        "output_tokens": 7,
    }
    message = anthropic.types.Message.model_validate(
        {
            "id": "msg_4",
            "type": "message",
            "role": "assistant",
            "model": "claude-x",
            "content": [{"type": "text", "text": "hi"}],
            "stop_reason": "end_turn",
            "usage": usage,
        }
    )
    assert reply_of_object(message) == Reply("msg_4", "claude-x", usage)
    assert reply_of_object(message.usage) == Reply(None, None, usage)


def test_reply_of_dicts() -> None:
    answer = {"id": "resp_2", "model": "gpt-x", "usage": RESPONSES_USAGE}
    assert reply_of_object(answer) == Reply("resp_2", "gpt-x", RESPONSES_USAGE)
    assert reply_of_object(RESPONSES_USAGE) == Reply(None, None, RESPONSES_USAGE)
    assert reply_of_object({"id": "resp_3", "output": []}) == Reply("resp_3", None, None)
    assert reply_of_object({"usage": None}) == Reply(None, None, None)


def test_reply_of_gemini_keeps_its_usage_key() -> None:
    """cachewatch reads Gemini's usage under its own keys only (contract section 1):
    the record must carry it there."""
    metadata = {"promptTokenCount": 100, "cachedContentTokenCount": 40}
    rest = {"responseId": "g1", "modelVersion": "gemini-x", "usageMetadata": metadata}
    assert reply_of_object(rest) == Reply("g1", "gemini-x", metadata, "usageMetadata")
    assert reply_of_object(metadata) == Reply(None, None, metadata, "usageMetadata")
    response = genai_types.GenerateContentResponse.model_validate(rest)
    snake = {"prompt_token_count": 100, "cached_content_token_count": 40}
    assert reply_of_object(response) == Reply("g1", "gemini-x", snake, "usage_metadata")
    assert reply_of_object(response.usage_metadata) == Reply(None, None, snake, "usage_metadata")


@pytest.mark.parametrize("bad", [None, 42, "usage", [CHAT_USAGE], b"{}"])
def test_reply_of_a_bad_type(bad: Any) -> None:
    with pytest.raises(TypeError):
        reply_of_object(bad)


# --- Decoder --------------------------------------------------------------------------

BODY = json.dumps({"id": "chatcmpl-5", "usage": CHAT_USAGE, "pad": "x" * 3000}).encode()


def decode_in_pieces(decoder: Decoder, data: bytes, size: int) -> bytes:
    return b"".join(decoder.decode(data[i : i + size]) for i in range(0, len(data), size))


@pytest.mark.parametrize("size", [1, 7, 100_000])
def test_decoder_gzip(size: int) -> None:
    decoder = Decoder(" GZip ")
    assert decode_in_pieces(decoder, gzip.compress(BODY), size) == BODY
    assert not decoder.failed


@pytest.mark.parametrize("size", [1, 7, 100_000])
def test_decoder_deflate(size: int) -> None:
    decoder = Decoder("deflate")
    assert decode_in_pieces(decoder, zlib.compress(BODY), size) == BODY
    assert not decoder.failed


@pytest.mark.parametrize("encoding", ["", "identity", "IDENTITY"])
def test_decoder_identity(encoding: str) -> None:
    decoder = Decoder(encoding)
    assert decode_in_pieces(decoder, BODY, 10) == BODY
    assert not decoder.failed


@pytest.mark.parametrize("encoding", ["br", "zstd", "compress", "gzip, br"])
def test_decoder_unknown_encoding_fails(encoding: str) -> None:
    decoder = Decoder(encoding)
    assert decoder.failed
    assert decoder.decode(BODY) == b""


def test_decoder_corrupt_gzip_fails() -> None:
    decoder = Decoder("gzip")
    assert decoder.decode(b"\x1f\x8b\x08\x00garbage that is not deflate") == b""
    assert decoder.failed
    assert decoder.decode(gzip.compress(BODY)) == b""  # nothing after a failure
    plain = Decoder("gzip")
    assert plain.decode(BODY) == b"" and plain.failed  # not gzip at all


# --- api_of ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path", "api"),
    [
        ("POST", "/v1/chat/completions", "chat"),
        ("POST", "/v1/chat/completions/", "chat"),
        ("POST", "/openai/deployments/x/chat/completions", "chat"),
        ("POST", "/v1/responses", "responses"),
        ("POST", "/v1/messages", "messages"),
        ("POST", "/v1/messages/count_tokens", None),
        ("POST", "/v1/messages/batches", None),
        ("POST", "/v1/responses/resp_1/cancel", None),
        ("POST", "/v1/embeddings", None),
        ("POST", "/v1/completions", None),
        ("GET", "/v1/chat/completions", None),
        ("GET", "/v1/responses", None),
        ("GET", "/v1/messages", None),
    ],
)
def test_api_of(method: str, path: str, api: str | None) -> None:
    assert api_of(method, path) == api


def test_raw_deflate_is_read_as_httpx_reads_it() -> None:
    """Some servers send `Content-Encoding: deflate` without zlib's header."""
    packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    raw = packer.compress(b'{"usage": {"prompt_tokens": 3}}') + packer.flush()
    decoder = Decoder("deflate")
    assert decoder.decode(raw[:5]) + decoder.decode(raw[5:]) == b'{"usage": {"prompt_tokens": 3}}'
    assert not decoder.failed


def test_a_large_event_in_tiny_chunks_costs_its_length() -> None:
    """One 2 MB event (a Responses API `response.completed` with a long answer)
    fed 64 bytes at a time: before, each chunk copied and split everything since
    the last event (quadratic: minutes); now it is linear."""
    text = "x" * 2_000_000
    answer = {"id": "r", "output": text, "usage": {"input_tokens": 7}}
    data = json.dumps({"type": "response.completed", "response": answer}).encode()
    event = b"event: response.completed\ndata: " + data + b"\n\n"
    sse = SseUsage()
    started = time.perf_counter()
    for at in range(0, len(event), 64):
        sse.feed(event[at : at + 64])
    sse.close()
    assert time.perf_counter() - started < 2.0
    assert reply_of_events("responses", sse.events).usage == {"input_tokens": 7}
