"""Transcripts -> records (`service.importers.claude_code`): one record per API call,
the usage of its last line, unreadable lines named, and fingerprints whose blocks
behave as the prompt cache would see them: shared within a session as its messages
are, never across sessions, new after a start changed within the TTL, kept over a
coffee break."""

from typing import Any

from service.importers.claude_code import read_transcript
from service.ingest.usage_blocks import START_SEGMENT
from tests.importers.transcripts import MODEL, T0, Session
from tests.ingest.test_usage_blocks import shared


def read(session: Session, extra: bytes = b"") -> Any:
    return read_transcript((session.text() + extra).splitlines(keepends=True))


def conversation(session_id: str = "s1") -> Session:
    s = Session(session_id)
    s.user(T0, "fix the failing test in tests/test_api.py " * 10)
    tool = {"type": "tool_use", "id": "tu_1", "name": "Bash", "input": {"command": "pytest"}}
    s.answer(T0 + 3, (10, 0, 20000), [{"type": "text", "text": "Running it."}, tool])
    s.tool_result(T0 + 8, "tu_1", "1 failed, 20 passed " * 40)
    s.answer(T0 + 10, (12, 20000, 700))
    return s


def test_one_record_per_call_with_its_last_lines_usage() -> None:
    s = conversation()
    out = read(s)
    assert [r["request_id"] for r in out.records] == ["req_s1_001", "req_s1_002"]
    first = out.records[0]
    assert first["usage"]["output_tokens"] == 120  # not the partial 1 of its first line
    assert first["usage"]["cache_creation_input_tokens"] == 20000
    assert first["ts"] == "2025-11-29T07:00:03.000Z"  # its first line's
    assert (first["model"], first["provider"], first["service"]) == (
        MODEL,
        "anthropic",
        "claude-code",
    )
    assert (first["session_id"], first["deploy"], first["scenario"]) == ("s1", "2.0.31", "main")
    assert first["segments"][0] == {
        "name": START_SEGMENT,
        "hash": "start-0",
        "tokens": first["segments"][0]["tokens"],
    }
    assert [seg["name"] for seg in out.records[1]["segments"]] == [
        START_SEGMENT,
        "message[0]",
        "message[1]",
        "message[2]",
    ]
    assert out.problems == [] and out.busted_starts == 0


def test_unreadable_lines_are_named_and_the_rest_is_read() -> None:
    s = conversation()
    bad = (
        b'{"type": "assistant", "uuid": "x1", "message": {"id": "m", "model": "m"}}\n'
        b"not json at all\n"
        b"[1, 2]\n"
        b'{"type": "mystery", "uuid": "x2"}\n'
        b'{"type": "summary", "summary": "Fixing tests", "leafUuid": "abc"}\n'
        b"\n"
    )
    out = read(s, bad)
    n = len(s.lines)
    assert [(p.line, p.reason.split(":")[0]) for p in out.problems] == [
        (n + 1, "an assistant line without message.usage.input_tokens"),
        (n + 2, "not JSON"),
        (n + 3, "not a JSON object"),
        (n + 4, "unknown line type 'mystery'"),
    ]
    assert len(out.records) == 2


def test_blocks_are_shared_within_a_session_and_never_across() -> None:
    one, two = read(conversation("s1")).records, read(conversation("s2")).records
    first, second = one
    assert first["segments"][0]["tokens"] > 15_000  # not shown: the start stands for them
    # The second call extends the first: everything the first sent is seen again.
    assert shared(first["block_hashes"], second["block_hashes"]) >= len(first["block_hashes"]) - 1
    assert shared(first["block_hashes"], two[0]["block_hashes"]) == 0


def test_a_start_busted_within_the_ttl_is_not_expiry() -> None:
    """12 s after a call, nothing read and everything written again: the system
    prompt or tools changed. 11 minutes after one: expiry, the blocks are seen."""
    s = conversation()
    s.user(T0 + 22, "and now the lint")
    s.answer(T0 + 25, (15, 0, 21500))  # busted: within 5 minutes, nothing read
    s.user(T0 + 25 + 660, "back from coffee")
    s.answer(T0 + 25 + 665, (15, 0, 22500))  # expired: 11 minutes later
    out = read(s)
    second, busted, expired = out.records[1:]
    assert out.busted_starts == 1
    assert shared(second["block_hashes"], busted["block_hashes"]) == 0
    assert busted["segments"][0]["hash"] not in ("start-0", second["segments"][0]["hash"])
    assert (
        shared(busted["block_hashes"], expired["block_hashes"]) >= len(busted["block_hashes"]) - 1
    )
    assert expired["segments"][0]["hash"] == busted["segments"][0]["hash"]


def test_the_one_hour_cache_extends_the_ttl_of_the_next_call() -> None:
    s = Session("s1")
    s.user(T0, "start " * 100)
    s.answer(T0 + 3, (10, 0, 20000), one_hour=True)
    s.user(T0 + 900, "a quarter of an hour later")
    s.answer(T0 + 903, (10, 0, 20500))  # within the hour: a changed start
    assert read(s).busted_starts == 1


def test_compaction_starts_the_messages_again() -> None:
    s = conversation()
    s.compact(T0 + 30)
    s.answer(T0 + 35, (20, 19_000, 1500))  # the start read, the summary written
    out = read(s)
    before, after = out.records[1], out.records[2]
    start_blocks = before["segments"][0]["tokens"] // before["block_size"]
    # The start is kept; the messages after it are the summary's, not the history.
    assert shared(before["block_hashes"], after["block_hashes"]) == start_blocks
    assert [seg["name"] for seg in after["segments"]] == [START_SEGMENT, "message[0]"]


def test_a_subagents_thread_is_its_own_scenario() -> None:
    s = conversation()
    for line in s.lines:
        line["isSidechain"] = True
        line["agentId"] = "a7"
    out = read(s)
    assert {r["scenario"] for r in out.records} == {"subagent"}
