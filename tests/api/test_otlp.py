"""POST /v1/otlp/v1/traces and /v1/otlp/v1/logs: the GenAI mapping, OTLP/HTTP answers
(partial_success, 400 with a Status, 415), auth, gzip, idempotency, and no 500 for
any attribute type."""

import base64
import gzip
import zlib
from typing import Any

import orjson
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from google.protobuf import json_format
from google.rpc import status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import (
    AnyValue,
    ArrayValue,
    KeyValue,
    KeyValueList,
)
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from sqlalchemy import Connection, func, select
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from service.ingest.hashing import pack_block_hashes
from service.models import RejectedRecord, UsageRecord
from service.settings import Settings

TRACES = "/v1/otlp/v1/traces"
LOGS = "/v1/otlp/v1/logs"
PROTOBUF = {"Content-Type": "application/x-protobuf"}
JSON = {"Content-Type": "application/json"}
IDS = ("traceId", "spanId", "parentSpanId")
START_NS = 1_714_564_800_000_000_000  # 2024-05-01T12:00:00Z


def value(v: Any) -> AnyValue:
    if v is None:
        return AnyValue()  # an empty value, as an array may hold
    if isinstance(v, bool):
        return AnyValue(bool_value=v)
    if isinstance(v, int):
        return AnyValue(int_value=v)
    if isinstance(v, float):
        return AnyValue(double_value=v)
    if isinstance(v, str):
        return AnyValue(string_value=v)
    if isinstance(v, bytes):
        return AnyValue(bytes_value=v)
    if isinstance(v, list):
        return AnyValue(array_value=ArrayValue(values=[value(x) for x in v]))
    assert isinstance(v, dict)
    return AnyValue(kvlist_value=KeyValueList(values=kvs(v)))


def kvs(attrs: dict[str, Any]) -> list[KeyValue]:
    return [KeyValue(key=k, value=value(v)) for k, v in attrs.items()]


GENAI = {
    "gen_ai.operation.name": "chat",
    "gen_ai.request.model": "gpt-4o",
    "gen_ai.response.model": "gpt-4o-2024-08-06",
    "gen_ai.usage.input_tokens": 1200,
    "gen_ai.usage.cache_read.input_tokens": 1024,
    "gen_ai.usage.output_tokens": 40,
}


def span(i: int = 1, attrs: dict[str, Any] | None = None, **fields: Any) -> Span:
    start = START_NS + i * 1_000_000_000
    values: dict[str, Any] = {
        "trace_id": bytes([i % 256]) * 16,
        "span_id": bytes([(i + 7) % 256]) * 8,
        "name": "chat gpt-4o",
        "start_time_unix_nano": start,
        "end_time_unix_nano": start + 2_500_000_000,
        **fields,
    }
    return Span(attributes=kvs({**GENAI, **(attrs or {})}), **values)


def traces(*spans: Span, resource: dict[str, Any] | None = None) -> ExportTraceServiceRequest:
    resource = {"service.name": "assistant", "service.version": "v3.5.0"} | (resource or {})
    return ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(attributes=kvs(resource)),
                scope_spans=[ScopeSpans(spans=list(spans))],
            )
        ]
    )


def otlp_json(request: Any) -> bytes:
    """OTLP JSON: protobuf JSON with hex trace and span ids."""

    def fix(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: base64.b64decode(v).hex() if k in IDS else fix(v) for k, v in node.items()}
        if isinstance(node, list):
            return [fix(x) for x in node]
        return node

    return orjson.dumps(fix(json_format.MessageToDict(request)))


def stored(session: Session) -> list[UsageRecord]:
    return list(session.scalars(select(UsageRecord).order_by(UsageRecord.id)))


def rejected(session: Session) -> list[RejectedRecord]:
    return list(session.scalars(select(RejectedRecord).order_by(RejectedRecord.id)))


def post(client: TestClient, headers: dict[str, str], request: Any, path: str = TRACES) -> Any:
    return client.post(path, content=request.SerializeToString(), headers={**headers, **PROTOBUF})


def trace_answer(response: Any) -> ExportTraceServiceResponse:
    assert response.status_code == 200, response.content
    assert response.headers["content-type"] == "application/x-protobuf"
    return ExportTraceServiceResponse.FromString(response.content)


def test_genai_span_is_stored_with_every_field(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    attrs = {
        "gen_ai.response.id": "chatcmpl-123",
        "server.address": "vllm-2.internal",
        "gen_ai.server.time_to_first_token": 0.25,
        "gen_ai.conversation.id": "conv-1",
        "cachewatch.block_size": 64,
        "cachewatch.block_hashes": [11, 12, 13],
        "cachewatch.prefix_hash": "p-abc",
        "cachewatch.prefix_tokens": 900,
        "cachewatch.segments": '[{"name": "system", "hash": "s1", "tokens": 900}]',
        "cachewatch.cache_key": "assistant-v3",
        "cachewatch.tenant": "acme",
    }
    answer = trace_answer(post(client, ingest_headers, traces(span(1, attrs))))
    assert not answer.HasField("partial_success")
    [row] = stored(session)
    assert row.request_id == "chatcmpl-123"
    assert row.ts_us == (START_NS + 1_000_000_000) // 1000
    assert (row.service, row.deploy, row.model) == ("assistant", "v3.5.0", "gpt-4o")
    assert (row.prompt_tokens, row.cached_tokens, row.completion_tokens) == (1200, 1024, 40)
    assert row.replica == "vllm-2.internal"
    assert row.ttft_ms == pytest.approx(250)
    assert row.latency_ms == pytest.approx(2500)
    assert row.session_id == "conv-1"
    assert (row.block_size, row.block_hashes) == (64, pack_block_hashes([11, 12, 13]))
    assert (row.prefix_hash, row.prefix_tokens) == ("p-abc", 900)
    assert row.segments == [{"name": "system", "hash": "s1", "tokens": 900}]
    assert (row.cache_key, row.tenant) == ("assistant-v3", "acme")


@pytest.mark.parametrize(
    ("usage", "prompt", "cached"),
    [
        # Current semantic conventions: input_tokens includes the cached ones.
        (
            {"gen_ai.usage.input_tokens": 1200, "gen_ai.usage.cache_read.input_tokens": 1000},
            1200,
            1000,
        ),
        (
            {
                "gen_ai.usage.input_tokens": 1200,
                "gen_ai.usage.cache_read.input_tokens": 1000,
                "gen_ai.usage.cache_creation.input_tokens": 100,
            },
            1200,
            1000,
        ),
        # Older names.
        (
            {"gen_ai.usage.prompt_tokens": 800, "gen_ai.usage.cache_read_input_tokens": 512},
            800,
            512,
        ),
        ({"llm.usage.prompt_tokens": 700, "llm.usage.cache_read_input_tokens": 256}, 700, 256),
        (
            {
                "gen_ai.usage.input_tokens": 900,
                "gen_ai.usage.input_tokens_details.cached_tokens": 300,
            },
            900,
            300,
        ),
        # Anthropic's own field names with cache_creation: input_tokens excludes the cache.
        (
            {
                "gen_ai.usage.input_tokens": 50,
                "gen_ai.usage.cache_read_input_tokens": 1000,
                "gen_ai.usage.cache_creation_input_tokens": 200,
            },
            1250,
            1000,
        ),
        (
            {
                "llm.usage.prompt_tokens": 10,
                "llm.usage.cache_read_input_tokens": 0,
                "llm.usage.cache_creation_input_tokens": 2000,
            },
            2010,
            0,
        ),
        ({"gen_ai.usage.input_tokens": 300}, 300, 0),
        # A JavaScript SDK sends whole numbers as doubles.
        (
            {"gen_ai.usage.input_tokens": 300.0, "gen_ai.usage.cache_read.input_tokens": 100.0},
            300,
            100,
        ),
        # cachewatch.* overrides everything.
        ({"gen_ai.usage.input_tokens": 50, "cachewatch.prompt_tokens": 5000}, 5000, 0),
    ],
)
def test_token_attribute_names(
    client: TestClient,
    ingest_headers: dict[str, str],
    session: Session,
    usage: dict[str, Any],
    prompt: int,
    cached: int,
) -> None:
    attrs = {"gen_ai.request.model": "claude", **usage}
    request = traces(
        Span(
            trace_id=b"\x01" * 16,
            span_id=b"\x02" * 8,
            start_time_unix_nano=START_NS,
            attributes=kvs(attrs),
        )
    )
    trace_answer(post(client, ingest_headers, request))
    [row] = stored(session)
    assert (row.prompt_tokens, row.cached_tokens) == (prompt, cached)


def post_one(client: TestClient, headers: dict[str, str], attrs: dict[str, Any]) -> Any:
    """One span with only these attributes (and a model)."""
    request = traces(
        Span(
            trace_id=b"\x01" * 16,
            span_id=b"\x02" * 8,
            start_time_unix_nano=START_NS,
            attributes=kvs({"gen_ai.request.model": "m", **attrs}),
        )
    )
    return trace_answer(post(client, headers, request))


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        # Current conventions: cache reads and writes are parts of input_tokens.
        (
            {
                "gen_ai.usage.input_tokens": 1200,
                "gen_ai.usage.cache_read.input_tokens": 1000,
                "gen_ai.usage.cache_creation.input_tokens": 150,
            },
            (1200, 1000, 150),
        ),
        ({"gen_ai.usage.input_tokens": 1200}, (1200, 0, 0)),
        # Anthropic's own names: input_tokens is the uncached part; the three add up.
        (
            {
                "gen_ai.usage.input_tokens": 50,
                "gen_ai.usage.cache_read_input_tokens": 1000,
                "gen_ai.usage.cache_creation_input_tokens": 200,
            },
            (1250, 1000, 200),
        ),
        # Both spellings (an instrumentation in transition): the conventions' counting.
        (
            {
                "gen_ai.usage.input_tokens": 1300,
                "gen_ai.usage.cache_read.input_tokens": 1000,
                "gen_ai.usage.cache_creation_input_tokens": 200,
                "gen_ai.usage.cache_read_input_tokens": 1000,
            },
            (1300, 1000, 200),
        ),
        (
            {
                "gen_ai.usage.input_tokens": 1300.0,
                "gen_ai.usage.cache_creation.input_tokens": 300.0,
                "cachewatch.cache_write_tokens": 7,
            },
            (1300, 0, 7),
        ),
    ],
)
def test_cache_writes(
    client: TestClient,
    ingest_headers: dict[str, str],
    session: Session,
    usage: dict[str, Any],
    expected: tuple[int, int, int],
) -> None:
    post_one(client, ingest_headers, usage)
    [row] = stored(session)
    assert (row.prompt_tokens, row.cached_tokens, row.cache_write_tokens) == expected


@pytest.mark.parametrize(
    ("attrs", "provider"),
    [
        ({"gen_ai.provider.name": "anthropic"}, "anthropic"),
        ({"gen_ai.provider.name": "aws.bedrock"}, "bedrock"),
        ({"gen_ai.provider.name": "gcp.vertex_ai"}, "google"),
        ({"gen_ai.provider.name": "gcp.gemini"}, "google"),
        ({"gen_ai.provider.name": "deepseek"}, "deepseek"),
        ({"gen_ai.provider.name": "mistral_ai"}, "mistral_ai"),  # as it is
        ({"gen_ai.system": "gemini"}, "google"),  # the older attribute and value
        ({"gen_ai.provider.name": "anthropic", "gen_ai.system": "openai"}, "anthropic"),
        # `openai` names the client library: OpenAI's API only by its host.
        ({"gen_ai.provider.name": "openai"}, "openai"),
        ({"gen_ai.provider.name": "openai", "server.address": "api.openai.com"}, "openai"),
        ({"gen_ai.system": "openai", "server.address": "vllm-2.internal"}, None),
        ({"gen_ai.provider.name": "openai", "server.address": "openai.example.com"}, None),
        ({}, None),
        ({"gen_ai.provider.name": "openai", "cachewatch.provider": "sglang"}, "sglang"),
    ],
)
def test_provider(
    client: TestClient,
    ingest_headers: dict[str, str],
    session: Session,
    attrs: dict[str, Any],
    provider: str | None,
) -> None:
    post_one(client, ingest_headers, {"gen_ai.usage.input_tokens": 10, **attrs})
    [row] = stored(session)
    assert row.provider == provider


def test_scenario_and_cache_ttl_from_cachewatch_attributes(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    attrs = {"cachewatch.scenario": "ticket-summary", "cachewatch.cache_ttl_s": 3600.0}
    answer = trace_answer(post(client, ingest_headers, traces(span(1, attrs))))
    assert not answer.HasField("partial_success")
    [row] = stored(session)
    assert (row.scenario, row.cache_ttl_s) == ("ticket-summary", 3600.0)
    assert (row.cache_write_tokens, row.provider) == (0, None)


def test_a_providers_diagnosis_from_cachewatch_attributes(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    """OTLP's GenAI conventions carry no miss reason: an instrumentation that has
    one sets the record's fields (docs/ingestion.md)."""
    attrs = {
        "cachewatch.provider_miss_reason": "system_changed",
        "cachewatch.provider_missed_tokens": 1200,
    }
    answer = trace_answer(post(client, ingest_headers, traces(span(1, attrs))))
    assert not answer.HasField("partial_success")
    [row] = stored(session)
    assert (row.provider_miss_reason, row.provider_missed_tokens) == ("system_changed", 1200)


@pytest.mark.parametrize(
    ("attrs", "message"),
    [
        (
            {"gen_ai.usage.cache_creation.input_tokens": 300},  # 1200 in, 1024 of them read
            "cache_write_tokens must not exceed prompt_tokens - cached_tokens",
        ),
        ({"gen_ai.usage.cache_creation.input_tokens": "3"}, "cache_write_tokens"),
        ({"gen_ai.provider.name": 5}, "provider: Input should be a valid string"),
        ({"gen_ai.provider.name": "p" * 51}, "provider: String should have at most 50"),
        ({"cachewatch.scenario": ""}, "scenario: String should have at least 1 character"),
        (
            {"cachewatch.cache_ttl_s": float("nan")},
            "cache_ttl_s: must be a number of seconds, not the string 'NaN'",
        ),
        ({"cachewatch.cache_ttl_s": 0}, "cache_ttl_s: Input should be greater than 0"),
    ],
)
def test_bad_new_fields_reject_the_span_with_a_reason(
    client: TestClient,
    ingest_headers: dict[str, str],
    session: Session,
    attrs: dict[str, Any],
    message: str,
) -> None:
    answer = trace_answer(post(client, ingest_headers, traces(span(1, attrs))))
    assert answer.partial_success.rejected_spans == 1
    assert message in answer.partial_success.error_message
    assert stored(session) == []
    [kept] = rejected(session)
    assert message in kept.reason


def test_fallbacks_response_model_ids_and_first_chunk_ttft(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    first_chunk = Span.Event(
        name="llm.content.completion.chunk", time_unix_nano=START_NS + 180_000_000
    )
    later_chunk = Span.Event(
        name="llm.content.completion.chunk", time_unix_nano=START_NS + 900_000_000
    )
    item = Span(
        trace_id=bytes.fromhex("0af7651916cd43dd8448eb211c80319c"),
        span_id=bytes.fromhex("b7ad6b7169203331"),
        start_time_unix_nano=START_NS,
        attributes=kvs({"gen_ai.response.model": "llama-3-70b", "gen_ai.usage.input_tokens": 10}),
        events=[first_chunk, later_chunk],
    )
    trace_answer(post(client, ingest_headers, traces(item)))
    [row] = stored(session)
    assert row.request_id == "0af7651916cd43dd8448eb211c80319cb7ad6b7169203331"
    assert row.model == "llama-3-70b"
    assert row.ttft_ms == pytest.approx(180)
    assert row.latency_ms is None  # no end time


def test_json_body_gets_a_json_answer(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    body = otlp_json(traces(span(1, {}), span(2, {"gen_ai.request.model": "m2"})))
    answer = client.post(TRACES, content=body, headers={**ingest_headers, **JSON})
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json"
    assert answer.json() == {}
    rows = stored(session)
    assert [r.request_id for r in rows] == [
        "01" * 16 + "08" * 8,
        "02" * 16 + "09" * 8,
    ]
    assert [r.model for r in rows] == ["gpt-4o", "m2"]


def test_json_with_camel_case_strings_and_original_names(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    """OTLP JSON as a hand-written client sends it: int64 as strings, enums as ints."""
    body = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "agent"}}]
                },
                "scopeSpans": [
                    {
                        "scope": {"name": "x"},
                        "spans": [
                            {
                                "traceId": "5b8efff798038103d269b633813fc60c",
                                "spanId": "eee19b7ec3c1b174",
                                "name": "chat",
                                "kind": 3,
                                "startTimeUnixNano": str(START_NS),
                                "endTimeUnixNano": str(START_NS + 10**9),
                                "attributes": [
                                    {"key": "gen_ai.request.model", "value": {"stringValue": "m"}},
                                    {
                                        "key": "gen_ai.usage.input_tokens",
                                        "value": {"intValue": "2048"},
                                    },
                                    {
                                        "key": "gen_ai.usage.cache_read.input_tokens",
                                        "value": {"intValue": 1024},
                                    },
                                    {"key": "cachewatch.block_size", "value": {"intValue": "16"}},
                                    {
                                        "key": "cachewatch.block_hashes",
                                        "value": {
                                            "arrayValue": {
                                                "values": [{"stringValue": "a"}, {"intValue": "7"}]
                                            }
                                        },
                                    },
                                ],
                                "someFutureField": True,
                            }
                        ],
                    }
                ],
            }
        ]
    }
    answer = client.post(TRACES, content=orjson.dumps(body), headers={**ingest_headers, **JSON})
    assert answer.status_code == 200, answer.text
    [row] = stored(session)
    assert row.request_id == "5b8efff798038103d269b633813fc60ceee19b7ec3c1b174"
    assert (row.service, row.prompt_tokens, row.cached_tokens) == ("agent", 2048, 1024)
    assert row.block_hashes == pack_block_hashes(["a", 7])
    assert row.latency_ms == pytest.approx(1000)


def test_partial_success_keeps_the_rejected_spans(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    no_model = span(2, {"gen_ai.request.model": "", "gen_ai.response.model": ""})
    bad_tokens = span(3, {"gen_ai.usage.input_tokens": "lots", "gen_ai.response.id": "r-3"})
    request = traces(span(1, {}), no_model, bad_tokens)
    answer = trace_answer(post(client, ingest_headers, request))
    assert answer.partial_success.rejected_spans == 2
    assert "r-3" in answer.partial_success.error_message
    assert "prompt_tokens" in answer.partial_success.error_message
    assert len(stored(session)) == 1
    kept = rejected(session)
    assert len(kept) == 2
    assert {k.request_id for k in kept} == {"02" * 16 + "09" * 8, "r-3"}
    assert {k.endpoint for k in kept} == {"otlp/traces"}
    raw = orjson.loads(kept[1].raw)
    assert raw["otlp"]["signal"] == "traces"
    assert raw["otlp"]["item"]["traceId"] == "03" * 16  # the span as sent, OTLP JSON
    assert any(a["key"] == "gen_ai.usage.input_tokens" for a in raw["otlp"]["item"]["attributes"])

    # The same partial success in JSON.
    body = otlp_json(traces(span(4, {"gen_ai.usage.input_tokens": -1})))
    answer_json = client.post(TRACES, content=body, headers={**ingest_headers, **JSON}).json()
    assert answer_json["partialSuccess"]["rejectedSpans"] == "1"
    assert "prompt_tokens" in answer_json["partialSuccess"]["errorMessage"]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
@pytest.mark.parametrize("name", ["gen_ai.server.time_to_first_token", "cachewatch.ttft_ms"])
def test_a_ttft_that_is_not_finite_rejects_the_span(
    client: TestClient, ingest_headers: dict[str, str], session: Session, name: str, bad: float
) -> None:
    """Before: 200 with no partial_success, and the TTFT stored as NULL."""
    spelled = {"nan": "'NaN'", "inf": "'Infinity'", "-inf": "'-Infinity'"}[str(bad)]
    answer = trace_answer(post(client, ingest_headers, traces(span(1, {name: bad}))))
    assert answer.partial_success.rejected_spans == 1
    assert f"ttft_ms: must be a number of milliseconds, not the string {spelled}" in (
        answer.partial_success.error_message
    )
    assert stored(session) == []
    [kept] = rejected(session)
    assert "ttft_ms" in kept.reason


def test_span_times_outside_the_accepted_range_are_rejected(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    """Before: a start of 2^64-1 ns (year 2554) was accepted, and wedged the pass."""
    last = span(1, {}, start_time_unix_nano=2**64 - 1, end_time_unix_nano=2**64 - 1)
    answer = trace_answer(post(client, ingest_headers, traces(last, span(2, {}))))
    assert answer.partial_success.rejected_spans == 1
    assert "ts must be before 2100" in answer.partial_success.error_message
    assert len(stored(session)) == 1


def test_non_genai_spans_are_ignored(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    http_span = Span(
        trace_id=b"\x05" * 16,
        span_id=b"\x06" * 8,
        name="GET /",
        attributes=kvs({"http.method": "GET"}),
    )
    db_span = Span(trace_id=b"\x05" * 16, span_id=b"\x07" * 8, name="SELECT")
    answer = trace_answer(post(client, ingest_headers, traces(http_span, span(1, {}), db_span)))
    assert not answer.HasField("partial_success")
    assert len(stored(session)) == 1
    assert rejected(session) == []
    only_other = trace_answer(post(client, ingest_headers, traces(http_span)))
    assert not only_other.HasField("partial_success")
    assert len(stored(session)) == 1 and rejected(session) == []


def test_reexport_is_idempotent(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    request = traces(span(1, {}), span(2, {"gen_ai.response.id": "resp-2"}))
    for _ in range(3):
        answer = trace_answer(post(client, ingest_headers, request))
        assert not answer.HasField("partial_success")
    assert len(stored(session)) == 2


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        (b"\xff\xfe not protobuf at all", PROTOBUF),
        (b"{not json", JSON),
        (b"[1, 2]", JSON),
        (b'{"resourceSpans": 5}', JSON),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "zz"}]}]}]}', JSON),
        (b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"startTimeUnixNano": "x"}]}]}]}', JSON),
        (b"\x1f\x8b\x08 truncated gzip", PROTOBUF),
    ],
)
def test_undecodable_body_is_400_with_status_and_kept(
    client: TestClient,
    ingest_headers: dict[str, str],
    session: Session,
    body: bytes,
    headers: dict[str, str],
) -> None:
    answer = client.post(TRACES, content=body, headers={**ingest_headers, **headers})
    assert answer.status_code == 400
    if headers is PROTOBUF:
        status = status_pb2.Status.FromString(answer.content)
    else:
        status = json_format.Parse(answer.content, status_pb2.Status())
    assert status.code == 3 and status.message
    [kept] = rejected(session)
    assert kept.raw == body and kept.endpoint == "otlp/traces"


def test_unsupported_content_type_is_415(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    body = traces(span()).SerializeToString()
    answer = client.post(
        TRACES, content=body, headers={**ingest_headers, "Content-Type": "text/plain"}
    )
    assert answer.status_code == 415
    assert stored(session) == [] and len(rejected(session)) == 1


def test_auth(client: TestClient, read_headers: dict[str, str]) -> None:
    body = traces(span()).SerializeToString()
    for path in (TRACES, LOGS):
        assert client.post(path, content=body, headers=PROTOBUF).status_code == 401
        bad = {**PROTOBUF, "Authorization": "Bearer cw_nope"}
        assert client.post(path, content=body, headers=bad).status_code == 401
        assert (
            client.post(path, content=body, headers={**PROTOBUF, **read_headers}).status_code == 403
        )


def test_gzip(client: TestClient, ingest_headers: dict[str, str], session: Session) -> None:
    body = gzip.compress(traces(span()).SerializeToString())
    headers = {**ingest_headers, **PROTOBUF, "Content-Encoding": "gzip"}
    trace_answer(client.post(TRACES, content=body, headers=headers))
    assert len(stored(session)) == 1


def test_gzip_bomb_is_413(app: FastAPI, client: TestClient, ingest_headers: dict[str, str]) -> None:
    app.state.settings = app.state.settings.model_copy(update={"max_decompressed_bytes": 1 << 20})
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = compressor.compress(b"\x00" * (8 << 20)) + compressor.flush()
    headers = {**ingest_headers, **PROTOBUF, "Content-Encoding": "gzip"}
    assert client.post(TRACES, content=bomb, headers=headers).status_code == 413


def test_database_unavailable_is_503(
    app: FastAPI, connection: Connection, ingest_headers: dict[str, str], session: Session
) -> None:
    class CommitFails(Session):
        def commit(self) -> None:
            raise OperationalError("COMMIT", {}, Exception("disk I/O error"))

    app.state.sessionmaker = sessionmaker(
        bind=connection, class_=CommitFails, join_transaction_mode="create_savepoint"
    )
    with TestClient(app, raise_server_exceptions=False) as failing:
        answer = post(failing, ingest_headers, traces(span()))
    assert answer.status_code == 503
    assert answer.headers["Retry-After"]
    assert stored(session) == []


MALFORMED: list[dict[str, Any]] = [
    {"gen_ai.usage.input_tokens": "12"},
    {"gen_ai.usage.input_tokens": True},
    {"gen_ai.usage.input_tokens": 12.5},
    {"gen_ai.usage.input_tokens": float("nan")},
    {"gen_ai.usage.input_tokens": [1, 2]},
    {"gen_ai.usage.input_tokens": {"a": 1}},
    {"gen_ai.usage.input_tokens": b"\x00\x01"},
    {"gen_ai.usage.input_tokens": 2**63 - 1},
    {"gen_ai.usage.input_tokens": -5},
    {"gen_ai.usage.cache_read.input_tokens": "x"},
    {"gen_ai.usage.cache_read.input_tokens": 5000},  # more than input
    {"gen_ai.usage.cache_creation_input_tokens": "x"},
    {"gen_ai.usage.cache_creation_input_tokens": 2**62, "gen_ai.usage.input_tokens": 2**62},
    {  # a sum under -2^63: orjson cannot write it into the body (was a 500)
        "gen_ai.usage.input_tokens": -(2**63),
        "gen_ai.usage.cache_read_input_tokens": -(2**63),
        "gen_ai.usage.cache_creation_input_tokens": -(2**63),
    },
    {"gen_ai.usage.output_tokens": [True]},
    {"gen_ai.request.model": 42},
    {"gen_ai.request.model": ["a"]},
    {"gen_ai.request.model": "x" * 500},
    {"gen_ai.request.model": "nul\x00"},
    {"gen_ai.response.id": 17},
    {"gen_ai.response.id": "r" * 300},
    {"gen_ai.server.time_to_first_token": "fast"},
    {"gen_ai.server.time_to_first_token": -1.0},
    {"gen_ai.server.time_to_first_token": float("inf")},
    {"server.address": {"host": "a"}},
    {"cachewatch.block_hashes": "1,2,3", "cachewatch.block_size": 16},
    {"cachewatch.block_hashes": [1.5, None], "cachewatch.block_size": 16},
    {"cachewatch.block_hashes": [1, 2]},
    {"cachewatch.block_size": "16"},
    {"cachewatch.segments": "{not json"},
    {"cachewatch.segments": 3},
    {"cachewatch.segments": '[{"name": 1}]'},
    {"cachewatch.segments": "[" * 5000},
    {"cachewatch.segments": "[" * 300 + "]" * 300},  # parses deeper than orjson writes
    {"cachewatch.prefix_hash": "p"},
    {"cachewatch.ttft_ms": "1"},
    {"cachewatch.tenant": b"\xff"},
    {"cachewatch.session_id": [[[[["deep"]]]]]},
    {"gen_ai.usage.input_tokens": {"a": {"b": {"c": {"d": {"e": [1, [2, [3]]]}}}}}},
]


@pytest.mark.parametrize("attrs", MALFORMED, ids=range(len(MALFORMED)))
def test_malformed_attributes_never_500(
    client: TestClient, ingest_headers: dict[str, str], session: Session, attrs: dict[str, Any]
) -> None:
    answer = trace_answer(post(client, ingest_headers, traces(span(1, attrs))))
    accepted = len(stored(session))
    assert accepted + answer.partial_success.rejected_spans == 1
    assert len(rejected(session)) == answer.partial_success.rejected_spans


def test_malformed_resource_attributes_never_500(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    request = traces(span(1, {}), resource={"service.name": 12, "service.version": [1]})
    answer = trace_answer(post(client, ingest_headers, request))
    assert answer.partial_success.rejected_spans == 1
    assert "service" in answer.partial_success.error_message


def deeply_nested(depth: int) -> AnyValue:
    node = AnyValue(string_value="bottom")
    for _ in range(depth):
        node = AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key="k", value=node)]))
    return node


def test_deeply_nested_attribute_never_500(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    item = span(1, {"gen_ai.usage.input_tokens": 5, "gen_ai.request.model": ""})
    item.attributes.append(KeyValue(key="deep", value=deeply_nested(30)))
    answer = trace_answer(post(client, ingest_headers, traces(item)))
    assert answer.partial_success.rejected_spans == 1  # for its empty model
    [kept] = rejected(session)
    assert orjson.loads(kept.raw)["otlp"]["item"]["attributes"][-1]["key"] == "deep"


def log_record(i: int, attrs: dict[str, Any], **fields: Any) -> LogRecord:
    values: dict[str, Any] = {"time_unix_nano": START_NS + i * 10**9, **fields}
    return LogRecord(attributes=kvs(attrs), **values)


def logs(*records: LogRecord) -> ExportLogsServiceRequest:
    return ExportLogsServiceRequest(
        resource_logs=[
            ResourceLogs(
                resource=Resource(attributes=kvs({"service.name": "search-agent"})),
                scope_logs=[ScopeLogs(log_records=list(records))],
            )
        ]
    )


def test_genai_log_records(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    in_span = log_record(
        1,
        {**GENAI, "gen_ai.response.id": "resp-log"},
        event_name="gen_ai.client.inference.operation.details",
        trace_id=b"\x0a" * 16,
        span_id=b"\x0b" * 8,
    )
    # No span context, usage in the body (a map): an id from the content.
    body_usage = LogRecord(
        observed_time_unix_nano=START_NS + 5 * 10**9,
        body=value({"gen_ai.request.model": "m", "gen_ai.usage.input_tokens": 64}),
    )
    plain = log_record(3, {"log.level": "info"}, body=value("hello"))
    request = logs(in_span, body_usage, plain)
    for _ in range(2):
        answer = client.post(
            LOGS, content=request.SerializeToString(), headers={**ingest_headers, **PROTOBUF}
        )
        assert answer.status_code == 200
        assert not ExportLogsServiceResponse.FromString(answer.content).HasField("partial_success")
    rows = stored(session)
    assert len(rows) == 2
    assert rows[0].request_id == "resp-log" and rows[0].service == "search-agent"
    assert rows[0].ts_us == (START_NS + 10**9) // 1000
    assert rows[1].request_id.startswith("otlp-") and rows[1].prompt_tokens == 64
    assert rows[1].ts_us == (START_NS + 5 * 10**9) // 1000


def test_log_partial_success_and_json(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    bad = log_record(
        1, {"gen_ai.usage.input_tokens": 10}, trace_id=b"\x01" * 16, span_id=b"\x02" * 8
    )
    answer = client.post(LOGS, content=otlp_json(logs(bad)), headers={**ingest_headers, **JSON})
    assert answer.status_code == 200
    assert answer.json()["partialSuccess"]["rejectedLogRecords"] == "1"
    [kept] = rejected(session)
    assert orjson.loads(kept.raw)["otlp"]["item"]["traceId"] == "01" * 16
    assert kept.endpoint == "otlp/logs"
    garbage = client.post(LOGS, content=b"\x08\x96", headers={**ingest_headers, **PROTOBUF})
    assert garbage.status_code == 400
    assert len(rejected(session)) == 2
    assert session.scalar(select(func.count()).select_from(UsageRecord)) == 0


def test_many_bad_spans_keep_a_sample_and_count_every_one(
    client: TestClient, settings: Settings, ingest_headers: dict[str, str], session: Session
) -> None:
    """A 51 KB protobuf of 500,000 bad spans made 500,000 rejected rows: a sample of
    each reason is kept, one row counts the rest, and the answer counts every span."""
    settings.rejected_sample_per_reason = 3
    bad = {"gen_ai.usage.input_tokens": 2**40}  # over the per-record bound
    answer = trace_answer(post(client, ingest_headers, traces(*(span(i, bad) for i in range(60)))))
    assert answer.partial_success.rejected_spans == 60
    kept = rejected(session)
    assert [row.batch_index for row in kept] == [0, 1, 2, None]
    assert kept[-1].reason.endswith(
        "[and 57 more records with this reason in this body were not kept]"
    )
    assert all(row.endpoint == "otlp/traces" for row in kept)
