"""The per-record bound on token counts (`records.MAX_TOKENS`, docs/ingestion.md):
a count above it is rejected with its reason, and kept, on every ingest path
(NDJSON through the bulk, fast and pydantic paths, a JSON array, a provider's
usage object, LiteLLM's payload, OTLP spans), so that no stored sum can overflow;
a count at the bound is stored."""

from typing import Any

import orjson
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.ingest.records import MAX_TOKENS
from service.models import RejectedRecord, UsageRecord
from service.services.ingestion import IngestOutcome, ingest_usage
from service.services.otlp import ingest_otlp

RECEIVED_US = 1_764_410_400_000_000  # 2025-11-29
OVER = "is over 1,073,741,824 (2^30) tokens"


def record(i: int, **fields: Any) -> dict[str, Any]:
    base = {"request_id": f"tb-{i}", "ts": 1_700_000_000 + i, "service": "s", "model": "m",
            "prompt_tokens": 100}  # fmt: skip
    return {k: v for k, v in {**base, **fields}.items() if v is not None}


def ingest(session: Session, body: bytes) -> IngestOutcome:
    return ingest_usage(
        session, body, content_encoding=None, max_decompressed_bytes=1 << 26,
        received_us=RECEIVED_US,
    )  # fmt: skip


def ndjson(records: list[dict[str, Any]]) -> bytes:
    return b"\n".join(orjson.dumps(r) for r in records)


def segments(*tokens: int) -> list[dict[str, Any]]:
    return [{"name": f"p{i}", "hash": f"h{i}", "tokens": t} for i, t in enumerate(tokens)]


OVER_THE_BOUND: list[dict[str, Any]] = [
    {"prompt_tokens": MAX_TOKENS + 1},
    {"prompt_tokens": 2**63 - 1},
    {"prompt_tokens": MAX_TOKENS + 1, "cached_tokens": MAX_TOKENS + 1},
    {"completion_tokens": MAX_TOKENS + 1},
    {"prefix_hash": "p", "prefix_tokens": MAX_TOKENS + 1},
    {"segments": segments(MAX_TOKENS + 1)},
    {"segments": segments(MAX_TOKENS // 2 + 1, MAX_TOKENS // 2)},  # together
    {"prompt_tokens": None, "usage": {"input_tokens": MAX_TOKENS, "cache_read_input_tokens": 1}},
    {"prompt_tokens": None, "usage": {"prompt_tokens": MAX_TOKENS + 1}},
    {"prompt_tokens": None, "usageMetadata": {"promptTokenCount": 2**62}},
    {"usage": {"prompt_tokens": 10, "completion_tokens": MAX_TOKENS + 1}},
]


@pytest.mark.parametrize("shape", ["ndjson", "array"])
def test_counts_over_the_bound_are_rejected_with_the_reason(session: Session, shape: str) -> None:
    records = [record(i, **fields) for i, fields in enumerate(OVER_THE_BOUND)]
    records.append(record(99))
    body = ndjson(records) if shape == "ndjson" else orjson.dumps(records)
    outcome = ingest(session, body)
    assert (outcome.accepted, outcome.rejected) == (1, len(OVER_THE_BOUND))
    assert [e["index"] for e in outcome.errors] == list(range(len(OVER_THE_BOUND)))
    for error in outcome.errors:
        assert OVER in error["error"], error
    kept = session.scalars(select(RejectedRecord.reason).order_by(RejectedRecord.id)).all()
    assert len(kept) == len(OVER_THE_BOUND) and all(OVER in reason for reason in kept)


def test_counts_at_the_bound_are_stored_and_sum_exactly(session: Session) -> None:
    """Three records at the bound (three at 2^63 - 1 overflowed the rollups): stored,
    on the bulk path, and their sum is exact."""
    at_bound = {"prompt_tokens": MAX_TOKENS, "cached_tokens": MAX_TOKENS,
                "completion_tokens": MAX_TOKENS, "segments": segments(MAX_TOKENS)}  # fmt: skip
    outcome = ingest(session, ndjson([record(i, **at_bound) for i in range(3)]))
    assert (outcome.accepted, outcome.rejected) == (3, 0)
    total = session.scalar(select(func.sum(UsageRecord.prompt_tokens)))
    assert total == 3 * MAX_TOKENS


def test_litellm_payloads_over_the_bound_are_rejected(session: Session) -> None:
    payload = {"id": "ll-1", "call_type": "completion", "startTime": 1_700_000_000.0,
               "model": "gpt-4o", "response": {"usage": {"prompt_tokens": 2**63 - 1,
                                                         "completion_tokens": 1}}}  # fmt: skip
    outcome = ingest(session, orjson.dumps(payload))
    assert outcome.rejected == 1
    assert OVER in outcome.errors[0]["error"]


def test_otlp_spans_over_the_bound_are_rejected(session: Session) -> None:
    def attribute(key: str, value: str | int) -> KeyValue:
        if isinstance(value, str):
            return KeyValue(key=key, value=AnyValue(string_value=value))
        return KeyValue(key=key, value=AnyValue(int_value=value))

    start = RECEIVED_US * 1000 - 3_600_000_000_000
    spans = [
        Span(
            trace_id=bytes([i + 1]) * 16,
            span_id=bytes([i + 1]) * 8,
            name="chat",
            start_time_unix_nano=start,
            end_time_unix_nano=start + 1_000_000,
            attributes=[
                attribute("gen_ai.operation.name", "chat"),
                attribute("gen_ai.request.model", "gpt-4o"),
                attribute("gen_ai.usage.input_tokens", tokens),
            ],
        )
        for i, tokens in enumerate([2**63 - 1, MAX_TOKENS + 1, MAX_TOKENS])
    ]
    resource = Resource(attributes=[attribute("service.name", "assistant")])
    request = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(resource=resource, scope_spans=[ScopeSpans(spans=spans)])]
    )
    outcome = ingest_otlp(
        session, request.SerializeToString(), signal="traces", encoding="protobuf",
        content_encoding=None, max_decompressed_bytes=1 << 26, received_us=RECEIVED_US,
    )  # fmt: skip
    assert (outcome.accepted, outcome.rejected) == (1, 2), outcome.errors
    assert all(OVER in e["error"] for e in outcome.errors)
