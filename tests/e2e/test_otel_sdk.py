"""The real OpenTelemetry Python SDK and its OTLP/HTTP exporters, pointed at a live
`cachewatch serve`: GenAI spans (protobuf, gzip and JSON bodies) and GenAI log
records are stored as usage records; the application's other spans are not."""

import base64
import time
from collections.abc import Iterator, Sequence
from typing import Any

import httpx
import orjson
import pytest
from google.protobuf import json_format
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from service.ingest.hashing import pack_block_hashes
from service.models import RejectedRecord, UsageRecord
from tests.conftest import LiveServer

otel_sdk = pytest.importorskip("opentelemetry.sdk.trace")
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans  # noqa: E402
from opentelemetry.exporter.otlp.proto.http import Compression  # noqa: E402
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter  # noqa: E402
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter  # noqa: E402
from opentelemetry.sdk._logs import LoggerProvider  # noqa: E402
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import (  # noqa: E402
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)
from opentelemetry.trace import SpanKind  # noqa: E402

RESOURCE = {"service.name": "assistant", "service.version": "v3.5.0"}


class Recording(OTLPSpanExporter):
    """The SDK's exporter, remembering what each export returned."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.results: list[SpanExportResult] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = super().export(spans)
        self.results.append(result)
        return result


@pytest.fixture
def token(live_server: LiveServer) -> str:
    return live_server.token("ingest")


def rows(server: LiveServer) -> list[UsageRecord]:
    engine = create_engine(server.database_url)
    try:
        with Session(engine) as session:
            return list(session.scalars(select(UsageRecord).order_by(UsageRecord.id)))
    finally:
        engine.dispose()


def rejected_count(server: LiveServer) -> int:
    engine = create_engine(server.database_url)
    try:
        with Session(engine) as session:
            return len(session.scalars(select(RejectedRecord)).all())
    finally:
        engine.dispose()


def emit_chat_spans(exporter: SpanExporter) -> None:
    """What an instrumented application emits: an HTTP server span, two GenAI client
    spans (one streamed, with a first-chunk event), and a database span."""
    provider = TracerProvider(resource=Resource.create(RESOURCE))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("POST /ask", kind=SpanKind.SERVER):
        with tracer.start_as_current_span("chat gpt-4o", kind=SpanKind.CLIENT) as span:
            span.set_attributes(
                {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.system": "openai",
                    "gen_ai.request.model": "gpt-4o",
                    "gen_ai.response.model": "gpt-4o-2024-08-06",
                    "gen_ai.response.id": "chatcmpl-sdk-1",
                    "gen_ai.usage.input_tokens": 2048,
                    "gen_ai.usage.cache_read.input_tokens": 1536,
                    "gen_ai.usage.output_tokens": 64,
                    "server.address": "api.openai.com",
                    "gen_ai.server.time_to_first_token": 0.3,
                    "cachewatch.block_size": 512,
                    "cachewatch.block_hashes": [101, 102, 103, 104],
                    "cachewatch.segments": orjson.dumps(
                        [{"name": "system", "hash": "s1", "tokens": 1500}]
                    ).decode(),
                    "cachewatch.session_id": "sess-9",
                }
            )
            time.sleep(0.01)
        with tracer.start_as_current_span("chat claude", kind=SpanKind.CLIENT) as span:
            span.set_attributes(
                {
                    "gen_ai.provider.name": "anthropic",
                    "gen_ai.request.model": "claude-sonnet",
                    "gen_ai.usage.input_tokens": 12,
                    "gen_ai.usage.cache_read_input_tokens": 3000,
                    "gen_ai.usage.cache_creation_input_tokens": 200,
                    "cachewatch.scenario": "answer",
                    "gen_ai.usage.output_tokens": 5,
                    "server.address": "api.anthropic.com",
                }
            )
            time.sleep(0.02)
            span.add_event("llm.content.completion.chunk")
            time.sleep(0.01)
        with tracer.start_as_current_span("SELECT users"):
            pass
    provider.shutdown()


def check_stored(stored: list[UsageRecord]) -> None:
    by_model = {r.model: r for r in stored}
    assert set(by_model) == {"gpt-4o", "claude-sonnet"}
    openai_row, claude_row = by_model["gpt-4o"], by_model["claude-sonnet"]
    assert openai_row.request_id == "chatcmpl-sdk-1"
    assert (openai_row.service, openai_row.deploy) == ("assistant", "v3.5.0")
    assert (openai_row.prompt_tokens, openai_row.cached_tokens) == (2048, 1536)
    assert openai_row.completion_tokens == 64
    assert openai_row.replica == "api.openai.com"
    assert openai_row.ttft_ms == pytest.approx(300)
    assert openai_row.latency_ms is not None and openai_row.latency_ms >= 10
    assert openai_row.block_hashes == pack_block_hashes([101, 102, 103, 104])
    assert openai_row.segments == [{"name": "system", "hash": "s1", "tokens": 1500}]
    assert openai_row.session_id == "sess-9"
    assert abs(openai_row.ts_us / 1e6 - time.time()) < 120
    assert (openai_row.provider, openai_row.cache_write_tokens) == ("openai", 0)
    # Anthropic's own field names: input_tokens counts the uncached part only.
    assert (claude_row.prompt_tokens, claude_row.cached_tokens) == (3212, 3000)
    assert (claude_row.cache_write_tokens, claude_row.provider) == (200, "anthropic")
    assert claude_row.scenario == "answer"
    assert len(claude_row.request_id) == 48  # trace id + span id, hex
    ttft, latency = claude_row.ttft_ms, claude_row.latency_ms
    assert ttft is not None and latency is not None and 15 <= ttft < latency


@pytest.mark.parametrize("compression", [Compression.NoCompression, Compression.Gzip])
def test_sdk_exports_protobuf_spans(
    live_server: LiveServer, token: str, compression: Compression
) -> None:
    exporter = Recording(
        endpoint=f"{live_server.url}/v1/otlp/v1/traces",
        headers={"Authorization": f"Bearer {token}"},
        compression=compression,
        timeout=10,
    )
    emit_chat_spans(exporter)
    assert exporter.results and set(exporter.results) == {SpanExportResult.SUCCESS}
    check_stored(rows(live_server))
    assert rejected_count(live_server) == 0

    # The exporter re-sending the same spans (a retry) stores nothing twice.
    emit_chat_spans(InMemorySpanExporter())
    assert len(rows(live_server)) == 2


def test_json_body_from_sdk_spans(live_server: LiveServer, token: str) -> None:
    """The Python exporter speaks protobuf only: the same SDK spans, encoded by the
    SDK's own encoder, posted as OTLP JSON (hex ids) like the Collector or JS SDK."""
    memory = InMemorySpanExporter()
    emit_chat_spans(memory)
    request = encode_spans(memory.get_finished_spans())
    body = hex_ids(json_format.MessageToDict(request))
    answer = httpx.post(
        f"{live_server.url}/v1/otlp/v1/traces",
        content=orjson.dumps(body),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "application/json"
    assert answer.json() == {}
    stored = rows(live_server)
    check_stored(stored)
    claude = next(r for r in stored if r.model == "claude-sonnet")
    span = next(s for s in memory.get_finished_spans() if s.name == "chat claude")
    assert span.context is not None
    assert claude.request_id == f"{span.context.trace_id:032x}{span.context.span_id:016x}"


def hex_ids(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: base64.b64decode(v).hex()
            if k in ("traceId", "spanId", "parentSpanId")
            else hex_ids(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [hex_ids(x) for x in node]
    return node


@pytest.fixture
def logger_provider(live_server: LiveServer, token: str) -> Iterator[LoggerProvider]:
    provider = LoggerProvider(resource=Resource.create(RESOURCE))
    exporter = OTLPLogExporter(
        endpoint=f"{live_server.url}/v1/otlp/v1/logs",
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    )
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    yield provider
    provider.shutdown()


def test_sdk_exports_genai_log_records(
    live_server: LiveServer, logger_provider: LoggerProvider
) -> None:
    tracer_provider = TracerProvider(resource=Resource.create(RESOURCE))
    logger = logger_provider.get_logger("gen_ai")
    with tracer_provider.get_tracer("app").start_as_current_span("chat"):
        logger.emit(
            event_name="gen_ai.client.inference.operation.details",
            attributes={
                "gen_ai.request.model": "llama-3-70b",
                "gen_ai.response.id": "cmpl-log-1",
                "gen_ai.usage.input_tokens": 4096,
                "gen_ai.usage.cache_read.input_tokens": 4000,
                "gen_ai.usage.output_tokens": 7,
                "server.address": "vllm-0",
            },
        )
        logger.emit(body="an ordinary log line", attributes={"user": "x"})
    logger_provider.force_flush()
    [row] = rows(live_server)
    assert (row.request_id, row.service, row.deploy) == ("cmpl-log-1", "assistant", "v3.5.0")
    assert (row.model, row.prompt_tokens, row.cached_tokens) == ("llama-3-70b", 4096, 4000)
    assert row.replica == "vllm-0"
    assert rejected_count(live_server) == 0
