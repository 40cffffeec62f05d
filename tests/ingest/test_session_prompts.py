"""A session's next turn, whose block-hash array starts with the last one's text,
has only its new hashes decoded (`service.ingest.hashing.SessionPrompts`). The
property: whatever follows the last array's text (more hashes, the same array,
something that is not JSON, numbers orjson reads differently, too many hashes),
the whole-body path and the per-line path give the reference's outcome, row for
row, as if nothing were remembered."""

import random
from collections.abc import Iterator

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.ingest import array_memos, hashing
from service.ingest.array_memos import SessionPrompts
from service.ingest.hashing import key_bytes
from service.ingest.records import MAX_BLOCKS
from tests.ingest.test_bulk import assert_bulk_agrees
from tests.ingest.test_fast import SETTINGS, current_outcome, reference_outcome

# What may follow an array's text up to its `]`: valid continuations and not.
TAILS = [
    b"]",
    b',"x"]',
    b", 7 ]",
    b',"a","b","c"]',
    b"3]",  # [1,2 then [1,23]: another last hash, not more hashes
    b'x"]',
    b",]",
    b",,1]",
    b",[1]]",
    b",null]",
    b",1.5]",
    b",1e400]",
    b",18446744073709551615]",
    b",18446744073709551616]",
    b",-9223372036854775809]",
    b',"\xff"]',
    b',"' + b"y" * 201 + b'"]',
    b"] ",
    b"]]",
]


def line(request_id: str, session: str | None, hashes_text: bytes) -> bytes:
    record = {
        "request_id": request_id,
        "ts": 1_714_564_800,
        "service": "s",
        "model": "m",
        "prompt_tokens": 100,
        "block_size": 4,
    }
    if session is not None:
        record["session_id"] = session
    text = orjson.dumps(record)
    return text[:-1] + b',"block_hashes":' + hashes_text + b"}"


def turns(rnd: random.Random, session: str | None, count: int) -> Iterator[bytes]:
    """A session's lines: each array the last valid one's text and a tail."""
    text = rnd.choice([b'["a"', b"[1,2", b'["p",2', b"["])
    for turn in range(count):
        tail = rnd.choice(TAILS)
        yield line(f"{session}-{turn}-{rnd.random()}", session, text + tail)
        if tail in (b',"x"]', b", 7 ]", b',"a","b","c"]', b"3]"):
            text = text + tail[:-1]


@SETTINGS
@given(st.randoms(use_true_random=False), st.booleans())
def test_turns_give_the_references_rows(rnd: random.Random, with_session: bool) -> None:
    session = f"s{rnd.randrange(3)}" if with_session else None
    body = b"\n".join(turns(rnd, session, rnd.randint(1, 6)))
    assert current_outcome(body) == reference_outcome(body)
    assert_bulk_agrees(body)


@pytest.mark.parametrize("tail", TAILS, ids=[t.decode("latin-1")[:12] for t in TAILS])
def test_each_tail_after_a_remembered_array(tail: bytes) -> None:
    first = line("r1", "sess-tail", b'["a","b"]')
    second = line("r2", "sess-tail", b'["a","b"' + tail)
    body = first + b"\n" + second
    assert current_outcome(body) == reference_outcome(body)
    assert_bulk_agrees(body)


def test_a_continuation_past_the_most_hashes_is_refused_as_before() -> None:
    first = line("m1", "sess-max", orjson.dumps(list(range(MAX_BLOCKS))))
    body = first + b"\n" + line("m2", "sess-max", orjson.dumps(list(range(MAX_BLOCKS + 1))))
    outcome = current_outcome(body)
    assert outcome == reference_outcome(body)
    assert [entry[1] for entry in outcome] == ["accepted", "rejected"]


def test_the_keys_reused_are_the_last_turns_and_new_ones_only_are_decoded() -> None:
    prompts = SessionPrompts(hashes=100)
    decoded: list[bytes] = []

    def decode(text: bytes) -> list[str | int] | None:
        decoded.append(text)
        return orjson.loads(text)  # type: ignore[no-any-return]

    def pack(hashes: list[str | int]) -> bytes:
        return b"".join(map(key_bytes, hashes))

    def pack_text(text: bytes) -> bytes | None:
        hashes = decode(text)
        return None if hashes is None else pack(hashes)

    assert prompts.pack("s", b'["a","b"]', pack_text) == pack(["a", "b"])
    assert prompts.pack("s", b'["a","b","c"]', pack_text) == pack(["a", "b", "c"])
    assert prompts.pack("s", b'["a","b","c"]', pack_text) == pack(["a", "b", "c"])
    assert prompts.pack("s", b'["a","x"]', pack_text) == pack(["a", "x"])
    assert decoded == [b'["a","b"]', b'["c"]', b'["a","x"]']


def test_the_sessions_held_are_bounded() -> None:
    prompts = SessionPrompts(hashes=10)
    for session in range(100):
        prompts.pack(str(session), b"[1,2,3]", lambda text: bytes(8 * len(orjson.loads(text))))
    held = prompts._held.young | prompts._held.old
    assert sum(len(keys) // 8 for _, keys in held.values()) <= 2 * 10 + 3
    assert "99" in held and "0" not in held


def test_the_process_memos_are_sized_together() -> None:
    before = hashing.MEMO.entries
    try:
        array_memos.use_memo(5)
        assert array_memos.SESSION_PROMPTS.hashes == 5
        assert array_memos.ARRAY_CHUNKS.hashes == 5
    finally:
        array_memos.use_memo(before)
