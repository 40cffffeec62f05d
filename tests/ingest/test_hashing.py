"""The int64 keys of block and prefix hashes are stored: the mapping may never
change. Golden keys computed by the mapping as it was before the memo (one BLAKE2b
call per string), for ints, hex strings and odd strings; and the memo, whatever it
holds, packs the same bytes as the definition."""

import random
from pathlib import Path

import numpy as np
import pytest

from service.api.app import create_app
from service.ingest import array_memos, hashing
from service.ingest.hashing import KeyMemo, hash_key, key_bytes, pack_block_hashes
from service.settings import Settings

GOLDEN: list[tuple[str | int, int]] = [
    (0, 0),
    (1, 1),
    (-1, -1),
    (2**63 - 1, 2**63 - 1),
    (-(2**63), -(2**63)),
    (2**63, -5391745018134886179),
    (2**64 - 1, -7914852165001746754),
    (2**64 + 5, -4979712415151084036),
    (-(2**63) - 1, -8809466977051578702),
    ("", -4173941471233418807),
    ("0", -4698871499947789690),
    ("1", -1227777692984573623),
    ("00000000deadbeef", 7505858995656626002),
    (
        "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        5287122298442173197,
    ),
    ("é日本語🙂", -4494867818655750206),
    (" s:x ", 2599542779392160083),
    ("i:1", -96062708195785254),
    ("x" * 200, 7569306833366352321),
]


@pytest.mark.parametrize(("value", "key"), GOLDEN, ids=[repr(v)[:20] for v, _ in GOLDEN])
def test_keys_are_the_golden_ones(value: str | int, key: int) -> None:
    assert hash_key(value) == key
    assert hash_key(value) == key  # the second time from the memo
    assert int.from_bytes(key_bytes(value), "little", signed=True) == key


def test_a_packed_array_holds_the_golden_keys_in_order() -> None:
    values = [v for v, _ in GOLDEN]
    for _ in range(2):  # unknown, then known to the memo
        blob = pack_block_hashes(values)
        assert np.frombuffer(blob, "<i8").tolist() == [k for _, k in GOLDEN]
    assert pack_block_hashes([1, "a", 2**64 - 1]).hex() == (
        "0100000000000000f96a63ca90ebbcb2bee656ffe3cb2892"
    )


def test_the_memo_packs_what_the_definition_packs_through_generations() -> None:
    """Small generations, hashes recurring and new, ints among strings: every pack
    equals the keys computed one by one, and the memo never holds more than two
    generations."""
    memo = KeyMemo(entries=50)
    rng = random.Random(7)
    pool = [f"{rng.getrandbits(64):016x}" for _ in range(400)] + [2**64 - 3, -5, 7]
    for _ in range(300):
        hashes = rng.sample(pool, rng.randint(0, 40))
        assert memo.pack(hashes) == b"".join(map(key_bytes, hashes))
        assert len(memo) < 2 * 50 + 40
    assert memo.key_bytes("abc") == key_bytes("abc")


def test_a_hash_in_use_survives_the_generations(monkeypatch: pytest.MonkeyPatch) -> None:
    """A hash used between floods of new ones is computed once: each generation
    that ends hands it on to the next one that reads it."""
    computed: list[str | int] = []

    def counting(value: str | int) -> bytes:
        computed.append(value)
        return key_bytes(value)

    monkeypatch.setattr(hashing, "key_bytes", counting)
    memo = KeyMemo(entries=4)
    for i in range(50):
        assert memo.pack(["hot", f"new-{i}"]) == b"".join(map(key_bytes, ["hot", f"new-{i}"]))
    assert computed.count("hot") == 1
    assert len(computed) == 51


def test_a_flood_of_new_hashes_turns_the_memo_off_for_a_while() -> None:
    """A generation that found none of its hashes: the next 8 generations' worth of
    hashes are keyed without the memo (nothing stored), then it is tried again."""
    memo = KeyMemo(entries=10)
    memo.pack(["kept"])
    for i in range(9):  # the rest of a generation, all new
        memo.pack([f"flood-{i}"])
    held = len(memo)
    for i in range(80):  # skipped: keyed right, nothing stored
        assert memo.pack([f"later-{i}"]) == key_bytes(f"later-{i}")
    assert len(memo) == held
    assert memo.pack(["again", "kept"]) == key_bytes("again") + key_bytes("kept")
    assert len(memo) == held + 2  # used again ("kept" carried from the old generation)


def test_a_memo_of_nothing_remembers_nothing() -> None:
    memo = KeyMemo(entries=0)
    assert memo.pack(["a", "b"]) == key_bytes("a") + key_bytes("b")
    assert len(memo) == 0


def test_a_hash_refused_is_not_remembered() -> None:
    """The fast path refuses ints orjson would make floats: such a record is packed
    by no one, and a later record holding the hash is asked about it again."""
    memo = KeyMemo(entries=100)
    refuse_big = lambda value: not isinstance(value, int) or value < 2**64  # noqa: E731
    assert memo.pack(["a", 2**64, "b"], refuse_big) is None
    assert memo.pack([2**64], refuse_big) is None
    assert memo.pack(["a", 2**64 - 1], refuse_big) == key_bytes("a") + key_bytes(2**64 - 1)


def test_known_blocks_then_new_ones_and_repeats_within_a_record() -> None:
    memo = KeyMemo(entries=100)
    memo.pack(["a", "b"])
    for hashes in (["a", "b", "c", "c", "a"], ["x", "a", "x"], ["a", "b", "c"]):
        assert memo.pack(hashes) == b"".join(map(key_bytes, hashes))


def test_the_app_sizes_the_process_memo(tmp_path: Path) -> None:
    before = hashing.MEMO.entries
    try:
        create_app(Settings(database_url=f"sqlite:///{tmp_path / 'a.db'}", hash_memo_entries=3))
        assert hashing.MEMO.entries == 3
        hashing.MEMO.pack(["a", "b", "c", "d"])
        assert len(hashing.MEMO) <= 6
    finally:
        array_memos.use_memo(before)
