"""A coding agent's new version that breaks its cache, seen with no fingerprints:
Claude Code's `api_request` events (mapped by `service.ingest.agents`, blocks
inferred from usage) over two days on 2.1.100, then a day on 2.1.101, whose every
call reads nothing and writes its whole prompt again. Detection reports one
regression, attributed to the new version (its `app.version` as `deploy`), and the
findings name what changed: the start (`system+tools`), volatile since the
release."""

from typing import Any

import orjson
import pytest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from sqlalchemy.orm import Session

from service.ingest import agents
from service.ingest.otlp import OtlpItem
from service.ingest.usage_blocks import UsageBlocks
from service.models import Regression
from service.services.detection import detect
from service.services.findings import findings
from service.services.ingestion import ingest_usage
from service.services.regressions import regression_to_json
from service.settings import Settings

T0 = 1_764_374_400  # 2025-11-29T00:00:00Z
DAY = 86_400
START_TOKENS, TURN_TOKENS = 18_000, 1_200


def event(session: str, at: int, version: str, tokens: tuple[int, int, int]) -> OtlpItem:
    uncached, read, created = tokens
    attributes = {
        "event.name": "api_request",
        "session.id": session,
        "app.version": version,
        "user.email": f"dev{hash(session) % 5}@example.com",
        "model": "claude-sonnet-4-5",
        "query_source": "repl_main_thread",
        "input_tokens": uncached,
        "cache_read_tokens": read,
        "cache_creation_tokens": created,
        "output_tokens": 200,
        "duration_ms": 3000,
    }
    return OtlpItem(
        attributes=attributes,
        resource={"service.name": "claude-code"},
        trace_id="",
        span_id="",
        start_ns=(at + 3) * 1_000_000_000,
        end_ns=0,
        source=LogRecord(time_unix_nano=(at + 3) * 1_000_000_000, severity_text=f"{session}/{at}"),
        event_name=agents.CLAUDE_CODE_REQUEST,
    )


def records() -> list[dict[str, Any]]:
    """Sessions of 10 calls a minute apart, a new one every 10 minutes, round the
    clock; from day 2 on, version 2.1.101 busts every call's start."""
    out = []
    for n, start in enumerate(range(T0, T0 + 3 * DAY, 600)):
        version = "2.1.100" if start < T0 + 2 * DAY else "2.1.101"
        prompt = START_TOKENS
        for turn in range(10):
            fresh = turn == 0 or version == "2.1.101"
            read = 0 if fresh else prompt
            prompt += TURN_TOKENS
            item = event(f"s{n}", start + 60 * turn, version, (5, read, prompt - read - 5))
            out.append(agents.to_record(item, agents.CLAUDE_CODE_REQUEST))
    return out


def test_a_version_that_busts_the_cache_is_its_regression(
    session: Session, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agents, "USAGE_BLOCKS", UsageBlocks())
    body = b"\n".join(orjson.dumps(r) for r in records())
    outcome = ingest_usage(
        session,
        body,
        content_encoding=None,
        max_decompressed_bytes=1 << 27,
        received_us=(T0 + 4 * DAY) * 1_000_000,
    )
    assert outcome.rejected == 0, outcome.errors
    detect(session, settings)
    found = [regression_to_json(r) for r in session.query(Regression).order_by(Regression.id)]
    assert len(found) == 1, found
    (regression,) = found
    assert regression["service"] == "claude-code"
    assert regression["attributed_to"]["deploy"] == "2.1.101", regression
    found_kinds = {(f.kind, f.segment, f.since_us) for f in findings(session, settings).findings}
    assert ("volatile_segment", "system+tools", (T0 + 2 * DAY) * 1_000_000) in found_kinds
