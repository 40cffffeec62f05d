"""A long block-hash array is keyed in runs cut after each string ending in `0`,
a run held looked up whole (`service.ingest.array_memos.ArrayChunks`). The
property: whatever the arrays (shared runs at any offset, escaped quotes, ints,
text that is not JSON or not an array the fast path takes), the keys are those of
decoding the whole array, or it is refused as it would be; and through a body,
the whole-body path and the per-line path give the reference's rows."""

import random
from collections.abc import Callable

import msgspec
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from service.ingest import fast
from service.ingest.array_memos import ArrayChunks
from service.ingest.hashing import key_bytes
from tests.ingest.test_bulk import assert_bulk_agrees
from tests.ingest.test_fast import SETTINGS, current_outcome, reference_outcome
from tests.ingest.test_session_prompts import line

_decoder = msgspec.json.Decoder(list[str | int])


def decode(text: bytes) -> list[str | int] | None:
    try:
        return _decoder.decode(text)
    except msgspec.DecodeError:
        return None


def pack(hashes: list[str | int]) -> bytes | None:
    return b"".join(map(key_bytes, hashes))


def recording() -> tuple[list[bytes], Callable[[bytes], list[str | int] | None]]:
    """A `decode` that keeps the texts it was given, and that list."""
    decoded: list[bytes] = []

    def counting(text: bytes) -> list[str | int] | None:
        decoded.append(text)
        return decode(text)

    return decoded, counting


def reference(text: bytes) -> bytes | None:
    hashes = decode(text)
    return None if hashes is None else pack(hashes)


def hex_hashes(start: int, count: int) -> list[str | int]:
    return [f"{value:016x}" for value in range(start, start + count)]


# Pieces of text an array may hold or end with: cuts inside and next to escapes,
# whitespace, ints, a string holding `0",` escaped, and texts that are not arrays.
ODD_ELEMENTS = [
    b'"a0"',
    b'"a0\\""',
    b'"a\\\\0"',
    b'"0\\",0"',
    b'"x0",  "y0"',
    b" 7",
    b"18446744073709551616",
    b'"\xff0"',
    b'"' + b"y" * 201 + b'0"',
]
ODD_ENDS = [b"]", b",]", b"0]", b'0",]', b"]]", b'"]', b", null]", b",[1]]", b" ]"]


def array_text(rnd: random.Random) -> bytes:
    """A long array from a small pool of hashes, at a random offset (so that arrays
    share runs elsewhere than at their starts), with odd elements and ends."""
    hashes = hex_hashes(rnd.randrange(0, 200), rnd.randrange(40, 160))
    elements = [orjson.dumps(h) for h in hashes]
    for _ in range(rnd.randrange(3)):
        elements.insert(rnd.randrange(len(elements) + 1), rnd.choice(ODD_ELEMENTS))
    text = b"[" + b",".join(elements)
    return text + (b"]" if rnd.random() < 0.6 else rnd.choice(ODD_ENDS))


@SETTINGS
@given(st.randoms(use_true_random=False), st.integers(min_value=0, max_value=400))
def test_the_keys_are_the_whole_arrays(rnd: random.Random, held: int) -> None:
    chunks = ArrayChunks(hashes=held)
    for _ in range(rnd.randint(1, 8)):
        text = array_text(rnd)
        assert chunks.pack(text, decode, pack) == reference(text), text


def test_a_shared_stretch_is_looked_up_not_decoded() -> None:
    chunks = ArrayChunks(hashes=100_000)
    decoded, counting = recording()
    first = orjson.dumps(hex_hashes(0, 1000))
    assert chunks.pack(first, counting, pack) == reference(first)
    decoded.clear()
    # A sliding window: 936 of these hashes were in the first array, 64 later.
    second = orjson.dumps(hex_hashes(64, 1000))
    assert chunks.pack(second, counting, pack) == reference(second)
    hashes_decoded = sum(len(orjson.loads(text)) for text in decoded)
    assert hashes_decoded < 64 + 2 * 32, hashes_decoded  # the new ones and two ends


def test_short_arrays_are_decoded_whole() -> None:
    chunks = ArrayChunks(hashes=100_000)
    decoded, counting = recording()
    text = orjson.dumps(hex_hashes(0, 16))
    assert chunks.pack(text, counting, pack) == reference(text)
    assert decoded == [text]


def test_the_runs_held_are_bounded() -> None:
    chunks = ArrayChunks(hashes=500)
    for start in range(0, 20_000, 1000):
        text = orjson.dumps(hex_hashes(start, 1000))
        assert chunks.pack(text, decode, pack) == reference(text)
    held = chunks._held.young | chunks._held.old
    assert sum(len(keys) for keys in held.values()) // 8 <= 2 * 500 + 1000


def test_a_flood_of_new_hashes_turns_the_cutting_off() -> None:
    chunks = ArrayChunks(hashes=2_000)
    decoded, counting = recording()
    for start in range(0, 10_000, 1000):  # never a hash twice
        text = orjson.dumps(hex_hashes(start, 1000))
        decoded.clear()
        assert chunks.pack(text, counting, pack) == reference(text)
    assert decoded == [text]  # decoded whole: the memo found nothing for a generation


def test_runs_in_use_stay_held_across_generations() -> None:
    chunks = ArrayChunks(hashes=10_000)
    decoded, counting = recording()
    shared = orjson.dumps(hex_hashes(0, 1000))  # a system prompt every session sends
    assert chunks.pack(shared, counting, pack) == reference(shared)
    for new in range(1, 41):  # forty arrays of new hashes: four generations
        other = orjson.dumps(hex_hashes(new * 10_000, 1000))
        assert chunks.pack(other, counting, pack) == reference(other)
        decoded.clear()
        assert chunks.pack(shared, counting, pack) == reference(shared)
        assert decoded == [], new


def test_a_line_is_keyed_through_the_process_memo(monkeypatch: pytest.MonkeyPatch) -> None:
    decoded, counting = recording()
    monkeypatch.setattr(fast, "_decode_hashes", counting)
    monkeypatch.setattr(fast, "ARRAY_CHUNKS", ArrayChunks(hashes=100_000))
    arrays = [orjson.dumps(hex_hashes(0, 1000)), orjson.dumps(hex_hashes(64, 1000))]
    for session, array in zip(("s1", "s2"), arrays, strict=True):
        record = fast.decode_line(line(session, session, array))
        assert record is not None
        assert record.block_hashes == reference(array)
    hashes_decoded = sum(len(orjson.loads(text)) for text in decoded)
    assert 1000 < hashes_decoded < 1000 + 64 + 2 * 32, hashes_decoded


@SETTINGS
@given(st.randoms(use_true_random=False), st.booleans())
def test_bodies_of_long_arrays_give_the_references_rows(
    rnd: random.Random, with_session: bool
) -> None:
    lines = [
        line(f"r{i}-{rnd.random()}", f"s{rnd.randrange(3)}" if with_session else None, text)
        for i, text in enumerate(array_text(rnd) for _ in range(rnd.randint(1, 5)))
    ]
    body = b"\n".join(lines)
    assert current_outcome(body) == reference_outcome(body)
    assert_bulk_agrees(body)


@pytest.mark.parametrize(
    "end",
    [b',"b0",]', b',"b0",,"c"]', b',"b0", ]', b',"b0",\n]', b',"b0"]'],
    ids=["trailing comma", "two commas", "space", "newline", "valid"],
)
def test_an_empty_run_after_a_cut_is_not_an_array(end: bytes) -> None:
    chunks = ArrayChunks(hashes=100_000)
    text = orjson.dumps(hex_hashes(0, 100))[:-1] + end
    for _ in range(2):  # not held, then with its other runs held
        assert chunks.pack(text, decode, pack) == reference(text)
