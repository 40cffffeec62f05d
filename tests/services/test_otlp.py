"""services.otlp on the real database, without HTTP: GenAI spans and log records
become usage records through `ingest_usage` (stored, duplicates counted, rejected
ones kept with their source item), other items are only counted, the exporter's
error message names the first rejections, an undecodable body is kept as sent, and
the decoding is charged to the request's reservation.
(tests/api/test_otlp.py checks the endpoints: answers, status codes, auth.)"""

import gzip
from typing import Any

import orjson
import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.ingest import inflight, otlp
from service.models import RejectedRecord, UsageRecord
from service.services.otlp import MAX_ERROR_MESSAGES, OtlpOutcome, ingest_otlp, keep_undecodable

START_NS = 1_714_564_800_000_000_000  # 2024-05-01T12:00:00Z
RECEIVED_US = START_NS // 1000 + 3600 * 1_000_000
GENAI = {
    "gen_ai.operation.name": "chat",
    "gen_ai.request.model": "gpt-4o",
    "gen_ai.usage.input_tokens": 1200,
    "gen_ai.usage.cache_read.input_tokens": 1024,
    "gen_ai.usage.output_tokens": 40,
}


def attributes(values: dict[str, Any]) -> list[KeyValue]:
    def one(v: Any) -> AnyValue:
        if isinstance(v, str):
            return AnyValue(string_value=v)
        return AnyValue(int_value=v)

    return [KeyValue(key=k, value=one(v)) for k, v in values.items()]


def span(i: int, **attrs: Any) -> Span:
    start = START_NS + i * 1_000_000_000
    return Span(
        trace_id=bytes([i + 1]) * 16,
        span_id=bytes([i + 1]) * 8,
        name="chat gpt-4o",
        start_time_unix_nano=start,
        end_time_unix_nano=start + 2_000_000_000,
        attributes=attributes({**GENAI, "gen_ai.response.id": f"resp-{i}", **attrs}),
    )


def traces(*spans: Span) -> bytes:
    resource = Resource(attributes=attributes({"service.name": "assistant"}))
    request = ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(resource=resource, scope_spans=[ScopeSpans(spans=spans)])]
    )
    return request.SerializeToString()


def logs(*records: LogRecord) -> bytes:
    resource = Resource(attributes=attributes({"service.name": "search-agent"}))
    scope = ScopeLogs(log_records=records)
    request = ExportLogsServiceRequest(
        resource_logs=[ResourceLogs(resource=resource, scope_logs=[scope])]
    )
    return request.SerializeToString()


def ingest(
    session: Session,
    body: bytes,
    signal: otlp.Signal = "traces",
    content_encoding: str | None = None,
    reservation: inflight.Reservation = inflight.UNMETERED,
) -> OtlpOutcome:
    return ingest_otlp(
        session,
        body,
        signal=signal,
        encoding="protobuf",
        content_encoding=content_encoding,
        max_decompressed_bytes=1 << 24,
        received_us=RECEIVED_US,
        reservation=reservation,
    )


def stored(session: Session) -> list[UsageRecord]:
    return list(session.scalars(select(UsageRecord).order_by(UsageRecord.id)))


def kept(session: Session) -> list[RejectedRecord]:
    return list(session.scalars(select(RejectedRecord).order_by(RejectedRecord.id)))


def test_genai_spans_are_stored_and_other_spans_only_counted(session: Session) -> None:
    http = Span(trace_id=b"\x09" * 16, span_id=b"\x09" * 8, name="GET /")
    body = traces(span(1), http, span(2))
    outcome = ingest(session, body)
    assert (outcome.accepted, outcome.duplicates, outcome.rejected) == (2, 0, 0)
    assert outcome.ignored == 1 and outcome.error_message == "" and outcome.undecodable is None
    rows = stored(session)
    assert [r.request_id for r in rows] == ["resp-1", "resp-2"]
    assert {(r.service, r.prompt_tokens, r.cached_tokens) for r in rows} == {
        ("assistant", 1200, 1024)
    }
    assert rows[0].ts_us == (START_NS + 10**9) // 1000
    # The same export again: duplicates, through the one idempotent path.
    again = ingest(session, body)
    assert (again.accepted, again.duplicates, again.rejected) == (0, 2, 0)
    assert len(stored(session)) == 2


def test_only_other_items_is_nothing_stored(session: Session) -> None:
    outcome = ingest(session, traces(Span(trace_id=b"\x01" * 16, span_id=b"\x01" * 8)))
    assert outcome == OtlpOutcome(ignored=1)
    assert stored(session) == [] and kept(session) == []


def test_rejected_spans_are_kept_and_the_first_named_for_the_exporter(session: Session) -> None:
    bad = [span(i, **{"gen_ai.usage.input_tokens": -1}) for i in range(10, 17)]
    outcome = ingest(session, traces(span(1), *bad))
    assert (outcome.accepted, outcome.rejected) == (1, 7)
    message = outcome.error_message
    shown = message.split("; ")[:MAX_ERROR_MESSAGES]
    assert [s.split(":")[0] for s in shown] == [f"span resp-{i}" for i in range(10, 15)]
    assert all("prompt_tokens" in s for s in shown)
    assert message.endswith("; and 2 more (kept in GET /v1/rejected)")
    rows = kept(session)
    assert [r.request_id for r in rows] == [f"resp-{i}" for i in range(10, 17)]
    assert {r.endpoint for r in rows} == {"otlp/traces"}
    source = orjson.loads(rows[0].raw)["otlp"]
    assert source["signal"] == "traces" and source["item"]["traceId"] == "0b" * 16


def test_log_records_are_named_as_log_records(session: Session) -> None:
    good = LogRecord(time_unix_nano=START_NS, attributes=attributes({**GENAI}))
    bad = LogRecord(
        time_unix_nano=START_NS + 10**9,
        attributes=attributes({**GENAI, "gen_ai.response.id": "bad-log",
                               "gen_ai.usage.input_tokens": 10}),
    )  # fmt: skip
    outcome = ingest(session, logs(good, bad), signal="logs")
    assert (outcome.accepted, outcome.rejected) == (1, 1)
    assert outcome.error_message.startswith("log record bad-log: ")
    [row] = kept(session)
    assert row.endpoint == "otlp/logs" and orjson.loads(row.raw)["otlp"]["signal"] == "logs"
    assert stored(session)[0].service == "search-agent"


@pytest.mark.parametrize(
    ("body", "content_encoding"),
    [(b"\xff\xfe not protobuf", None), (b"\x1f\x8b\x08 truncated gzip", "gzip")],
)
def test_an_undecodable_body_is_kept_as_sent(
    session: Session, body: bytes, content_encoding: str | None
) -> None:
    outcome = ingest(session, body, content_encoding=content_encoding)
    assert outcome.rejected == 1 and outcome.undecodable
    assert outcome.accepted == 0 and stored(session) == []
    [row] = kept(session)
    assert row.raw == body and row.endpoint == "otlp/traces"
    assert row.reason == outcome.undecodable and row.received_us == RECEIVED_US
    assert row.request_id is None and row.batch_index is None


def test_keep_undecodable_bounds_the_reason(session: Session) -> None:
    keep_undecodable(session, b"\x00body", "logs", "x" * 5000, RECEIVED_US)
    [row] = kept(session)
    assert row.raw == b"\x00body" and row.endpoint == "otlp/logs"
    assert row.reason == "x" * 2000


def test_a_gzip_body_is_decoded_and_charged_to_the_reservation(session: Session) -> None:
    body = traces(*[span(i) for i in range(20)])
    budget = inflight.Budget(1 << 30)
    with inflight.reserving(budget) as reservation:
        outcome = ingest(session, gzip.compress(body), content_encoding="gzip",
                         reservation=reservation)  # fmt: skip
        assert outcome.accepted == 20
        assert reservation.held >= len(body)  # the inflated body, at least
    assert budget.held == 0  # given back at the request's end
    too_small = inflight.Budget(len(body))
    with pytest.raises(inflight.BodyTooLarge), inflight.reserving(too_small) as reservation:
        ingest(session, gzip.compress(body), content_encoding="gzip", reservation=reservation)
