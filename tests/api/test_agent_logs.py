"""`POST /v1/logs` (the path an OTLP exporter appends to the server's root) with
Claude Code's events: its API requests are records, its other events are ignored
and counted, a request body is counted and paired, a bad event is rejected with its
reason and kept (docs/integrations.md, "Coding agents")."""

import orjson
from fastapi.testclient import TestClient
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from sqlalchemy.orm import Session

from service.telemetry import REGISTRY
from tests.api.test_otlp import PROTOBUF, log_record, logs, rejected, stored, value

STANDARD = {"session.id": "s-1", "app.version": "2.1.90", "user.email": "bob@example.com"}


def counted(kind: str) -> float:
    return (
        REGISTRY.get_sample_value("cachewatch_otlp_items_total", {"signal": "logs", "kind": kind})
        or 0.0
    )


def event(i: int, name: str, **attrs: object) -> LogRecord:
    attributes = {**STANDARD, "event.name": name, "event.sequence": i, **attrs}
    return log_record(i, attributes, body=value(f"claude_code.{name}"))


def test_claude_code_events_at_the_root_path(
    client: TestClient, ingest_headers: dict[str, str], session: Session
) -> None:
    thread = {"model": "claude-opus-4-5", "query_source": "repl_main_thread"}
    body = {
        "system": "You are Claude Code.",
        "tools": [],
        "messages": [{"role": "user", "content": "hi"}],
    }
    request = logs(
        event(1, "user_prompt", prompt_length=2),
        event(2, "api_request_body", body=orjson.dumps(body).decode(), **thread),
        # Claude Code before 2.1.122: every number a string.
        event(
            3,
            "api_request",
            input_tokens="4",
            cache_read_tokens="2048",
            cache_creation_tokens="100",
            output_tokens="7",
            duration_ms="1500.5",
            cost_usd="0.002",
            request_id="req_1",
            **thread,
        ),
        event(4, "tool_result", tool_name="Bash", success="true"),
        event(5, "api_error", error="overloaded", status_code=529, **thread),
        event(6, "api_request", input_tokens="many", request_id="req_2", **thread),
    )
    before = {kind: counted(kind) for kind in ("ignored", "body")}
    answer = client.post(
        "/v1/logs", content=request.SerializeToString(), headers={**ingest_headers, **PROTOBUF}
    )
    assert answer.status_code == 200
    partial = ExportLogsServiceResponse.FromString(answer.content).partial_success
    assert partial.rejected_log_records == 1
    assert "req_2" in partial.error_message and "usage.input_tokens" in partial.error_message
    [row] = stored(session)
    assert (row.request_id, row.prompt_tokens, row.cached_tokens) == ("req_1", 2152, 2048)
    assert (row.cache_write_tokens, row.completion_tokens, row.latency_ms) == (100, 7, 1500.5)
    assert (row.session_id, row.tenant, row.deploy) == ("s-1", "bob@example.com", "2.1.90")
    assert row.segments is not None and row.block_hashes is not None  # the body's
    [kept] = rejected(session)
    assert orjson.loads(kept.raw)["otlp"]["item"]["body"] == {
        "stringValue": "claude_code.api_request"
    }
    assert counted("ignored") - before["ignored"] == 3  # user_prompt, tool_result, api_error
    assert counted("body") - before["body"] == 1
