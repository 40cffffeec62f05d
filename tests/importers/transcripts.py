"""Claude Code transcripts as it writes them (one JSON object a line), for the
importer's tests: user lines, assistant answers written one content block a line
with the same `message.id` (earlier lines with a partial `output_tokens`), tool
results, summaries, compaction."""

from __future__ import annotations

import uuid as uuidlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

MODEL = "claude-sonnet-4-5-20250929"
T0 = 1_764_399_600.0  # 2025-11-29T07:00:00Z


def stamp(at_s: float) -> str:
    return (
        datetime.fromtimestamp(at_s, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


@dataclass
class Session:
    session_id: str
    version: str = "2.0.31"
    lines: list[dict[str, Any]] = field(default_factory=list)
    parent: str | None = None
    calls: int = 0

    def _line(self, kind: str, at_s: float, message: dict[str, Any], **extra: Any) -> str:
        uuid = str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"{self.session_id}/{len(self.lines)}"))
        self.lines.append(
            {
                "parentUuid": self.parent,
                "isSidechain": False,
                "userType": "external",
                "cwd": "/home/dev/project",
                "sessionId": self.session_id,
                "version": self.version,
                "gitBranch": "main",
                "type": kind,
                "message": message,
                "uuid": uuid,
                "timestamp": stamp(at_s),
                **extra,
            }
        )
        self.parent = uuid
        return uuid

    def user(self, at_s: float, text: str, **extra: Any) -> None:
        self._line("user", at_s, {"role": "user", "content": text}, **extra)

    def tool_result(self, at_s: float, tool_use_id: str, output: str) -> None:
        content = [{"type": "tool_result", "tool_use_id": tool_use_id, "content": output}]
        self._line("user", at_s, {"role": "user", "content": content})

    def answer(
        self,
        at_s: float,
        tokens: tuple[int, int, int],
        blocks: list[dict[str, Any]] | None = None,
        *,
        one_hour: bool = False,
    ) -> str:
        """One API call's answer: each content block a line of its own, the usage
        (input, cache read, cache creation) on each, output tokens partial but on
        the last. Returns its request id."""
        self.calls += 1
        message_id = f"msg_{self.session_id}_{self.calls:03d}"
        request_id = f"req_{self.session_id}_{self.calls:03d}"
        blocks = blocks or [{"type": "text", "text": f"answer {self.calls} " + "z" * 300}]
        uncached, read, created = tokens
        for i, block in enumerate(blocks):
            usage = {
                "input_tokens": uncached,
                "cache_creation_input_tokens": created,
                "cache_read_input_tokens": read,
                "cache_creation": {
                    "ephemeral_5m_input_tokens": 0 if one_hour else created,
                    "ephemeral_1h_input_tokens": created if one_hour else 0,
                },
                "output_tokens": 1 if i < len(blocks) - 1 else 120,
                "service_tier": "standard",
            }
            message = {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": MODEL,
                "content": [block],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": usage,
            }
            self._line("assistant", at_s + 0.1 * i, message, requestId=request_id)
        return request_id

    def compact(self, at_s: float) -> None:
        """Compaction: a boundary, then the summary as a new thread's first line."""
        self.lines.append(
            {
                "parentUuid": None,
                "logicalParentUuid": self.parent,
                "type": "system",
                "subtype": "compact_boundary",
                "content": "Conversation compacted",
                "compactMetadata": {"trigger": "auto", "preTokens": 150000},
                "sessionId": self.session_id,
                "uuid": str(uuidlib.uuid4()),
                "timestamp": stamp(at_s),
            }
        )
        self.parent = None
        self.user(
            at_s,
            "This session is being continued from a previous conversation. " * 20,
            isCompactSummary=True,
        )

    def text(self) -> bytes:
        return b"".join(orjson.dumps(line) + b"\n" for line in self.lines)


START_TOKENS = 18_000  # Claude Code's system prompt and tools, not in the transcript
TURN_TOKENS = 1_500  # what each turn adds to the history


def agent_day(
    sessions: int = 12, turns: int = 12, *, every_call_busted: bool = False, coffee_every: int = 3
) -> list[Session]:
    """One developer's three hours: sessions of `turns` calls 40 s apart, one after
    another; every `coffee_every`-th session pauses 12 minutes before its 6th turn
    (its cache expired: the whole prompt written again). With `every_call_busted`, a
    hook rewrites the project's memory file before every call: each call reads
    nothing and writes its whole prompt again, seconds after the previous one."""
    out = []
    at = T0
    for n in range(sessions):
        s = Session(f"day-{n:02d}")
        prompt = START_TOKENS
        for turn in range(turns):
            if turn == 6 and n % coffee_every == coffee_every - 1:
                at += 720  # a coffee break
            s.user(at, f"session {n} turn {turn}: " + "please refactor the module " * 40)
            coffee = turn == 6 and n % coffee_every == coffee_every - 1
            fresh = turn == 0 or every_call_busted or coffee
            read = 0 if fresh else prompt
            prompt += TURN_TOKENS
            s.answer(at + 4, (8, read, prompt - read - 8))
            at += 40
        out.append(s)
        at += 60
    return out
