"""Claude Code's session transcripts -> usage records (`cachewatch import claude-code`,
docs/integrations.md "Claude Code's transcripts"). Pure: lines in, records and
problems out; `service.importers.cli` reads the files and posts the records.

A transcript is one JSON object a line, one file a session (subagents' threads in
files of their own or marked `isSidechain`). Each line has a `uuid` and the
`parentUuid` of the line before it in its thread; an assistant line carries the
API's `message` (`id`, `model`, `usage`, one content block), its `requestId` and
`timestamp`. One answer spans several lines with the same `message.id`: it is
one API call, one record, with the usage of its last line (the earlier ones may
carry a partial `output_tokens`) as the record's `usage` (the server reads it).

What a call sent, as far as the transcript shows: the messages of its thread up to
it (the chain of `parentUuid`s, lines of one role and one answer merged back into
API messages; `History` builds each call's from the previous call's). **The
system prompt and the tool definitions are not in the transcript.** So each
call's fingerprint is that of its messages, after a *start* of blocks standing for
what is not shown, salted per session thread so that two sessions never share a
block (Claude Code writes the working directory and the date into its system
prompt) while one session's calls share theirs as their messages do; a
compaction (a new chain from its summary) is then a history rewrite.
`service.importers.threads` decides when the start changed (usage alone tells it
from expiry) and sizes the blocks to the prompts.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from service.importers.threads import Thread
from service.ingest.timestamps import parse_ts

SERVICE = "claude-code"
PROVIDER = "anthropic"
MAIN_THREAD = "main"
SUBAGENT = "subagent"
#: Lines that are no API call and are skipped without a word (not problems).
SKIPPED_TYPES = frozenset(
    {"summary", "system", "file-history-snapshot", "queue-operation", "attachment"}
    | {"custom-title", "ai-title", "progress", "x-event"}
)


@dataclass(frozen=True)
class Problem:
    """A line that could not be read, and why."""

    line: int
    reason: str


@dataclass
class _Line:
    number: int
    uuid: str
    parent: str | None
    role: str
    content: Any
    message_id: str | None = None


@dataclass
class _Call:
    """One API call: its first and last assistant lines."""

    first: dict[str, Any]
    last: dict[str, Any]
    first_line: int
    head_uuid: str


@dataclass
class Transcript:
    """What one file gave: its records in call order, and its unreadable lines."""

    records: list[dict[str, Any]] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    busted_starts: int = 0


def read_transcript(lines: Iterable[bytes], *, service: str = SERVICE) -> Transcript:
    """The records of one transcript file's lines (in file order)."""
    out = Transcript()
    history = History()
    calls: dict[str, _Call] = {}
    for number, raw in enumerate(lines, start=1):
        entry = _entry(raw, number, out.problems)
        if entry is not None:
            _take(entry, number, history.by_uuid, calls, out.problems)
    threads: dict[str, Thread] = {}
    ordered = sorted(calls.values(), key=lambda c: (_time(c.first), c.first_line))
    made = [_record(call, history, threads, service) for call in ordered]
    sized = {name: thread.fingerprints() for name, thread in threads.items()}
    out.records = [record | sized[thread.name][index] for thread, index, record in made]
    out.busted_starts = sum(thread.busted for thread in threads.values())
    return out


def _entry(raw: bytes, number: int, problems: list[Problem]) -> dict[str, Any] | None:
    if not raw.strip():
        return None
    try:
        entry = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        problems.append(Problem(number, f"not JSON: {exc}"))
        return None
    if not isinstance(entry, dict):
        problems.append(Problem(number, "not a JSON object"))
        return None
    return entry


def _take(
    entry: dict[str, Any],
    number: int,
    by_uuid: dict[str, _Line],
    calls: dict[str, _Call],
    problems: list[Problem],
) -> None:
    kind = entry.get("type")
    if kind in SKIPPED_TYPES or (kind is None and "leafUuid" in entry):
        return
    if kind not in ("user", "assistant"):
        problems.append(Problem(number, f"unknown line type {kind!r}"))
        return
    message, uuid = entry.get("message"), entry.get("uuid")
    if not isinstance(message, dict) or not isinstance(uuid, str):
        problems.append(Problem(number, f"a {kind} line without a message object or a uuid"))
        return
    parent = entry.get("parentUuid")
    line = _Line(number, uuid, parent if isinstance(parent, str) else None, kind, None)
    line.content = message.get("content")
    if kind == "assistant":
        reason = _call_problem(entry, message)
        if reason:
            problems.append(Problem(number, reason))
        line.message_id = message.get("id") if isinstance(message.get("id"), str) else None
        if line.message_id and not reason and not _synthetic(entry, message):
            held = calls.get(line.message_id)
            if held is None:
                calls[line.message_id] = _Call(entry, entry, number, uuid)
            else:
                held.last = entry
    by_uuid[uuid] = line


def _call_problem(entry: dict[str, Any], message: dict[str, Any]) -> str:
    if _synthetic(entry, message):
        return ""
    usage = message.get("usage")
    if not isinstance(message.get("id"), str):
        return "an assistant line without message.id"
    if not isinstance(usage, dict) or not isinstance(usage.get("input_tokens"), int):
        return "an assistant line without message.usage.input_tokens"
    if not isinstance(message.get("model"), str) or _time(entry) is None:
        return "an assistant line without message.model or a valid timestamp"
    return ""


def _synthetic(entry: dict[str, Any], message: dict[str, Any]) -> bool:
    """No API call: Claude Code's own notices and API errors written as answers."""
    return message.get("model") == "<synthetic>" or bool(entry.get("isApiErrorMessage"))


def _time(entry: dict[str, Any]) -> float | None:
    """The line's `timestamp` in epoch seconds, read as a record's `ts` is."""
    stamp = entry.get("timestamp")
    if not isinstance(stamp, str):
        return None
    try:
        return parse_ts(stamp) / 1_000_000
    except ValueError:
        return None


def _record(
    call: _Call, history: History, threads: dict[str, Thread], service: str
) -> tuple[Thread, int, dict[str, Any]]:
    """A call's record but its fingerprint, its thread and its index there."""
    first, last = call.first, call.last
    usage = dict(last["message"]["usage"])
    session = str(first.get("sessionId") or "")
    scenario = SUBAGENT if first.get("isSidechain") else MAIN_THREAD
    name = f"{session}/{scenario}/{first.get('agentId') or ''}"
    thread = threads.get(name) or threads.setdefault(name, Thread(name))
    ts = _time(first)
    assert ts is not None  # _call_problem checked it
    index = thread.add(usage, ts, history.before(history.by_uuid[call.head_uuid].parent))
    record: dict[str, Any] = {
        "request_id": first.get("requestId") or first["message"]["id"],
        "ts": first["timestamp"],
        "service": service,
        "model": first["message"]["model"],
        "provider": PROVIDER,
        "usage": usage,
        "session_id": session or None,
        "deploy": first.get("version"),
        "scenario": scenario,
    }
    return thread, index, {k: v for k, v in record.items() if v is not None}


class History:
    """A transcript's lines by uuid, and the API messages before each call (`before`),
    built from those before the previous call: a session's calls cost what each adds,
    not its whole history again (the last `KEPT` lists are kept)."""

    KEPT = 64

    def __init__(self) -> None:
        self.by_uuid: dict[str, _Line] = {}
        self._before: OrderedDict[str, list[tuple[str, dict[str, Any]]]] = OrderedDict()

    def before(self, parent: str | None) -> list[tuple[str, dict[str, Any]]]:
        """The messages up to line `parent` (the thread's lines back to its first),
        one per run of lines of one role (an answer's lines, a user turn's text and
        tool results), each keyed by its lines' uuids (its identity)."""
        head, chain, seen = parent, [], set()
        while parent is not None and parent in self.by_uuid and parent not in self._before:
            if parent in seen:
                break
            seen.add(parent)
            chain.append(self.by_uuid[parent])
            parent = self.by_uuid[parent].parent
        messages = list(self._before.get(parent, [])) if parent is not None else []
        for line in reversed(chain):
            blocks = _blocks(line.content)
            if messages and messages[-1][1]["role"] == line.role:
                key, message = messages[-1]
                merged = {"role": line.role, "content": [*message["content"], *blocks]}
                messages[-1] = (f"{key} {line.uuid}", merged)
            else:
                messages.append((line.uuid, {"role": line.role, "content": blocks}))
        if head is not None:
            self._before[head] = messages
            while len(self._before) > self.KEPT:
                self._before.popitem(last=False)
        return messages


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, list):
        return list(content)
    return [{"type": "text", "text": content if isinstance(content, str) else ""}]
