"""Claude Code's telemetry as it sends it: the real OpenTelemetry SDK's logger and
OTLP/HTTP log exporter (protobuf, and OTLP JSON as `http/json` sends it) posting
events named and shaped as Claude Code's monitoring page gives them (body
`claude_code.api_request`, `event.name` `api_request`, the standard attributes) to a
live `cachewatch serve` at `/v1/logs`, the path an exporter given the server's
root appends. Two tests:

* one session with a coffee break: the records, the hit rate and the one `expiry`
  rewarm come out as computed by hand;
* raw request bodies (`OTEL_LOG_RAW_API_BODIES=1`) of two teams, one with a
  timestamp at the top of its system prompt and one whose tool list comes in
  floating order: the findings name `system` and `tools`."""

import random
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any

import httpx
import orjson
import pytest
from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import LoggerProvider, ReadableLogRecord
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    LogRecordExporter,
    LogRecordExportResult,
)
from opentelemetry.sdk.resources import Resource
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from cachewatch_client.fingerprint import fingerprint
from service.models import UsageRecord
from tests.conftest import LiveServer

MODEL = "claude-sonnet-4-5"
T0_S = 1_764_399_600  # 2025-11-29T07:00:00Z
NS = 1_000_000_000
TOOLS = ("Bash", "Read", "Edit", "Write", "Grep", "Glob")


class JsonLogExporter(LogRecordExporter):
    """`OTEL_EXPORTER_OTLP_LOGS_PROTOCOL=http/json`: the SDK's own encoding of the
    batch, posted as OTLP JSON."""

    def __init__(self, endpoint: str, token: str) -> None:
        self._client = httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=30)
        self._endpoint = endpoint

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        body = json_format.MessageToDict(encode_logs(batch))
        answer = self._client.post(
            self._endpoint, content=orjson.dumps(body), headers={"Content-Type": "application/json"}
        )
        ok = answer.status_code == 200 and answer.json() == {}
        return LogRecordExportResult.SUCCESS if ok else LogRecordExportResult.FAILURE

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True  # nothing held: each export is posted at once

    def shutdown(self) -> None:
        self._client.close()


def provider(server: LiveServer, token: str, protocol: str, **resource: str) -> LoggerProvider:
    """Claude Code's logger provider: its resource, a batch processor, one exporter."""
    attributes = {"service.name": "claude-code", "service.version": "2.1.130", **resource}
    made = LoggerProvider(resource=Resource.create(attributes))
    endpoint = f"{server.url}/v1/logs"
    exporter: LogRecordExporter = (
        OTLPLogExporter(endpoint=endpoint, headers={"Authorization": f"Bearer {token}"})
        if protocol == "http/protobuf"
        else JsonLogExporter(endpoint, token)
    )
    # A queue for the whole test: the SDK drops what does not fit.
    processor = BatchLogRecordProcessor(exporter, max_export_batch_size=256, max_queue_size=10_000)
    made.add_log_record_processor(processor)
    return made


class ClaudeCode:
    """One user's Claude Code session emitting its events."""

    def __init__(self, logs: LoggerProvider, session: str, email: str) -> None:
        self.logger = logs.get_logger("com.anthropic.claude_code.events")
        self.standard = {
            "session.id": session,
            "app.version": "2.1.130",
            "organization.id": "0b7c-org",
            "user.account_uuid": f"acc-{email}",
            "user.email": email,
            "user.id": f"anon-{email}",
            "terminal.type": "vscode",
        }
        self.sequence = 0

    def _emit(self, name: str, at_s: float, attributes: dict[str, Any]) -> None:
        self.sequence += 1
        stamp = datetime.fromtimestamp(at_s, UTC).isoformat(timespec="milliseconds")
        self.logger.emit(
            timestamp=round(at_s * NS),
            body=f"claude_code.{name}",
            attributes={
                **self.standard,
                "event.name": name,
                "event.timestamp": stamp.replace("+00:00", "Z"),
                "event.sequence": self.sequence,
                "prompt.id": f"p-{self.sequence}",
                **attributes,
            },
        )

    def call(
        self,
        started_s: float,
        tokens: tuple[int, int, int],
        body: dict[str, Any] | None = None,
        request_id: str | None = None,
    ) -> None:
        """One API call: its body when sent (raw bodies on), `api_request` when done
        (2 s later), with (input, cache read, cache creation) tokens."""
        thread = {"model": MODEL, "query_source": "repl_main_thread"}
        if body is not None:
            text = orjson.dumps(body).decode()
            self._emit(
                "api_request_body", started_s, {**thread, "body": text, "body_length": len(text)}
            )
        uncached, read, created = tokens
        self._emit(
            "api_request",
            started_s + 2,
            {
                **thread,
                "cost_usd": 0.01,
                "duration_ms": 2000,
                "input_tokens": uncached,
                "output_tokens": 150,
                "cache_read_tokens": read,
                "cache_creation_tokens": created,
                "speed": "normal",
                **({"request_id": request_id} if request_id else {}),
            },
        )


def conversation(turns: int, *, system: str, tools: Sequence[str] = TOOLS) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for turn in range(turns):
        messages.append({"role": "user", "content": f"step {turn}: run the tests " + "x" * 400})
        if turn < turns - 1:
            messages.append({"role": "assistant", "content": f"done with step {turn} " + "y" * 400})
    return {
        "model": MODEL,
        "system": [{"type": "text", "text": system}],
        "tools": [
            {
                "name": name,
                "description": f"Runs {name}. " + "Use it carefully. " * 8,
                "input_schema": {"type": "object", "properties": {"arg": {"type": "string"}}},
            }
            for name in tools
        ],
        "messages": messages,
        "max_tokens": 32000,
    }


SYSTEM = "You are Claude Code, Anthropic's official CLI for Claude. " * 60


def stored(server: LiveServer) -> list[UsageRecord]:
    engine = create_engine(server.database_url)
    try:
        with Session(engine) as session:
            return list(session.scalars(select(UsageRecord).order_by(UsageRecord.ts_us)))
    finally:
        engine.dispose()


@pytest.fixture
def tokens(live_server: LiveServer) -> Iterator[tuple[str, str]]:
    yield live_server.token("ingest"), live_server.token("read")


@pytest.mark.parametrize("protocol", ["http/protobuf", "http/json"])
def test_a_session_with_a_coffee_break(
    live_server: LiveServer, tokens: tuple[str, str], protocol: str
) -> None:
    ingest, read = tokens
    logs = provider(live_server, ingest, protocol)
    agent = ClaudeCode(logs, "sess-coffee", "alice@example.com")
    bodies = [conversation(n, system=SYSTEM) for n in (1, 2, 3)]
    agent.call(T0_S, (10, 0, 3000), bodies[0], "req_1")
    agent.call(T0_S + 60, (20, 3000, 500), bodies[1], "req_2")
    agent.call(T0_S + 60 + 600, (30, 0, 4000), bodies[2], "req_3")  # a 10-minute break
    logs.force_flush()
    logs.shutdown()

    rows = stored(live_server)
    assert [r.request_id for r in rows] == ["req_1", "req_2", "req_3"]
    assert [r.prompt_tokens for r in rows] == [3010, 3520, 4030]
    assert [r.cached_tokens for r in rows] == [0, 3000, 0]
    assert [r.cache_write_tokens for r in rows] == [3000, 500, 4000]
    assert [r.ts_us for r in rows] == [T0_S * 10**6, (T0_S + 60) * 10**6, (T0_S + 660) * 10**6]
    first = rows[0]
    assert (first.service, first.model, first.provider) == ("claude-code", MODEL, "anthropic")
    assert (first.session_id, first.tenant, first.deploy) == (
        "sess-coffee",
        "alice@example.com",
        "2.1.130",
    )
    assert first.scenario == "repl_main_thread" and first.latency_ms == 2000

    totals = httpx.get(
        f"{live_server.url}/v1/metrics",
        headers={"Authorization": f"Bearer {read}"},
        timeout=60,
    ).json()["totals"]
    assert totals["requests"] == 3 and totals["fingerprinted_requests"] == 3
    assert totals["hit_rate"] == pytest.approx(3000 / (3010 + 3520 + 4030))
    # The third call's blocks had been seen in the second, 11 minutes before: more
    # than Anthropic's 5-minute TTL. Its seen run: the blocks the second body's
    # fingerprint shares with the third's, capped by its prompt_tokens.
    second, third = (fingerprint(b) for b in bodies[1:])
    shared = 0
    for a, b in zip(second["block_hashes"], third["block_hashes"], strict=False):
        if a != b:
            break
        shared += 1
    cacheable = min(4030, shared * third["block_size"])
    assert cacheable > 400
    assert totals["rewarms"] == {
        "total": 1,
        "expiry": 1,
        "concurrent": 0,
        "routing": 0,
        "eviction": 0,
        "unknown": 0,
        "below_minimum": 0,
    }
    assert totals["rewarm_tokens"] == cacheable


def test_without_bodies_the_coffee_break_is_expiry(
    live_server: LiveServer, tokens: tuple[str, str]
) -> None:
    """The default: no request bodies. The session's blocks are inferred from its
    usage (an append-only history): the call after the break finds them seen but
    read nothing, an `expiry` rewarm of the blocks the previous call had."""
    ingest, read = tokens
    logs = provider(live_server, ingest, "http/protobuf")
    agent = ClaudeCode(logs, "sess-plain", "bob@example.com")
    agent.call(T0_S, (10, 0, 3000), request_id="req_a")
    agent.call(T0_S + 60, (20, 3000, 500), request_id="req_b")
    agent.call(T0_S + 660, (30, 0, 4000), request_id="req_c")
    logs.force_flush()
    logs.shutdown()
    totals = httpx.get(
        f"{live_server.url}/v1/metrics", headers={"Authorization": f"Bearer {read}"}, timeout=60
    ).json()["totals"]
    assert totals["fingerprinted_requests"] == 3 and totals["history_rewrites"] == 0
    assert totals["rewarms"]["total"] == 1 and totals["rewarms"]["expiry"] == 1, totals
    # Blocks of 128: the first call's 3,010 tokens are ceil(3010 / 128) = 24 of them,
    # the second's 3,520 are 28. rewarm_tokens = max(0, cacheable - cached) per call:
    # the second's min(3520, 24 * 128) - 3000 = 72 (under the rewarm threshold), the
    # third's min(4030, 28 * 128) - 0 = 3,584.
    assert totals["rewarm_tokens"] == (3072 - 3000) + min(4030, 28 * 128)


def test_raw_bodies_name_the_system_prompt_and_the_tools(
    live_server: LiveServer, tokens: tuple[str, str]
) -> None:
    """Two teams, three hours, a call every 20 s in 5-turn sessions: one puts the
    time at the top of its system prompt, the other sends its tools in floating
    order. Neither reads anything from the cache (each start is new)."""
    ingest, read = tokens
    rng = random.Random(5)
    teams = {
        "team-dates": provider(
            live_server, ingest, "http/protobuf", **{"cachewatch.service": "team-dates"}
        ),
        "team-tools": provider(
            live_server, ingest, "http/protobuf", **{"cachewatch.service": "team-tools"}
        ),
    }
    for team, logs in teams.items():
        for session in range(3 * 3600 // 100):
            agent = ClaudeCode(logs, f"{team}-{session}", f"dev{session % 7}@example.com")
            for turn in range(5):
                at = T0_S + session * 100 + turn * 20
                if team == "team-dates":
                    stamp = datetime.fromtimestamp(at, UTC).isoformat()
                    body = conversation(turn + 1, system=f"Current time: {stamp}\n{SYSTEM}")
                else:
                    body = conversation(
                        turn + 1, system=SYSTEM, tools=rng.sample(TOOLS, len(TOOLS))
                    )
                agent.call(at, (20, 0, 3500 + 250 * turn), body)
        logs.force_flush()
        logs.shutdown()
    deadline = time.monotonic() + 60
    findings: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        answer = httpx.get(
            f"{live_server.url}/v1/findings",
            headers={"Authorization": f"Bearer {read}"},
            timeout=120,
        )
        assert answer.status_code == 200, answer.text
        findings = answer.json()
        if len(findings) >= 2:
            break
    rows = stored(live_server)
    assert len(rows) == 2 * 540 and all(r.segments and r.block_hashes for r in rows)
    named = {(f["service"], f["kind"], f["segment"]) for f in findings}
    assert ("team-dates", "volatile_segment", "system") in named, findings
    assert ("team-tools", "volatile_segment", "tools") in named, findings
    for finding in findings:
        if finding["kind"] == "volatile_segment":
            assert finding["wasted_usd_per_day"] > 0, finding
