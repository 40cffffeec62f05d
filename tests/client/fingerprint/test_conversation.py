"""`Conversation` gives exactly `fingerprint({"messages": ...})` of each call, whatever
the calls do to the history: append, rewrite an early message, drop the tail,
start again (compaction), send a system message first, run past MAX_BLOCKS."""

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cachewatch_client.fingerprint import fingerprint
from cachewatch_client.fingerprint.blocks import MAX_BLOCKS
from cachewatch_client.fingerprint.conversation import Conversation

TEXT = st.text(alphabet="abc é\n{}", min_size=0, max_size=700)
# Each message: a key for its content, so equal keys mean equal messages.
MESSAGE = st.tuples(st.sampled_from(["user", "assistant"]), TEXT)
EDIT = st.one_of(
    st.tuples(st.just("append"), st.lists(MESSAGE, min_size=1, max_size=3)),
    st.tuples(st.just("rewrite"), st.integers(0, 30), MESSAGE),
    st.tuples(st.just("truncate"), st.integers(0, 30)),
    st.tuples(st.just("restart"), st.lists(MESSAGE, min_size=1, max_size=2)),
)


def body(history: list[tuple[str, str]]) -> list[tuple[str, dict[str, Any]]]:
    return [(f"{role}:{text}", {"role": role, "content": text}) for role, text in history]


@settings(max_examples=60, deadline=None)
@given(st.lists(EDIT, min_size=1, max_size=12), st.sampled_from([1, 16, 128]))
def test_each_call_equals_the_whole_fingerprint(edits: list[Any], block_size: int) -> None:
    conversation = Conversation(block_size)
    history: list[tuple[str, str]] = []
    for edit in edits:
        kind = edit[0]
        if kind == "append":
            history += edit[1]
        elif kind == "rewrite" and history:
            history[edit[1] % len(history)] = edit[2]
        elif kind == "truncate":
            history = history[: edit[1]]
        elif kind == "restart":
            history = list(edit[1])
        messages = body(history)
        expected = fingerprint({"messages": [m for _, m in messages]}, block_size=block_size)
        assert conversation.fingerprint(messages) == expected


def test_a_system_message_first_and_the_block_limit() -> None:
    conversation = Conversation(1)
    system = [
        ("s", {"role": "system", "content": "be brief"}),
        ("u", {"role": "user", "content": "hi"}),
    ]
    assert conversation.fingerprint(system) == fingerprint(
        {"messages": [m for _, m in system]}, block_size=1
    )
    long = [("u0", {"role": "user", "content": "x y " * (2 * MAX_BLOCKS)})]
    got = conversation.fingerprint(long)
    assert len(got["block_hashes"]) == MAX_BLOCKS
    assert got == fingerprint({"messages": [m for _, m in long]}, block_size=1)
    longer = [*long, ("a1", {"role": "assistant", "content": "ok"})]
    assert conversation.fingerprint(longer) == fingerprint(
        {"messages": [m for _, m in longer]}, block_size=1
    )
