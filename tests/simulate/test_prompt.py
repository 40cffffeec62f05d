"""Chained block hashes of piece-built prompts."""

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from service.simulate.prompt import EMPTY, Piece, hash_prompt

pieces_st = st.lists(st.tuples(st.integers(1, 6), st.integers(1, 40)), min_size=0, max_size=8)


def tokens_of(pieces: list[Piece]) -> list[tuple[int, int]]:
    """Token-level content: token k of a piece is (cid, k)."""
    return [(cid, k) for cid, n in pieces for k in range(n)]


@settings(max_examples=300, deadline=None)
@given(a=pieces_st, b=pieces_st, block=st.sampled_from([1, 4, 16, 32]))
def test_equal_hash_i_iff_equal_prefix_through_block_i(
    a: list[Piece], b: list[Piece], block: int
) -> None:
    ha, hb = hash_prompt(a, block), hash_prompt(b, block)
    ta, tb = tokens_of(a), tokens_of(b)
    assert len(ha.hashes) == math.ceil(len(ta) / block)
    for i in range(min(len(ha.hashes), len(hb.hashes))):
        end_a = min((i + 1) * block, len(ta))
        end_b = min((i + 1) * block, len(tb))
        same_prefix = end_a == end_b and ta[:end_a] == tb[:end_b]
        assert (ha.hashes[i] == hb.hashes[i]) == same_prefix


@settings(max_examples=300, deadline=None)
@given(base=pieces_st, new=pieces_st, shared=st.integers(0, 8), block=st.sampled_from([4, 16]))
def test_incremental_hashing_equals_hashing_from_scratch(
    base: list[Piece], new: list[Piece], shared: int, block: int
) -> None:
    prompt = base[:shared] + new
    based = hash_prompt(base, block)
    assert hash_prompt(prompt, block, based) == hash_prompt(prompt, block, EMPTY)


def test_appending_keeps_the_full_blocks_and_redoes_the_partial_one() -> None:
    first = hash_prompt([(1, 100), (2, 30)], 64)
    second = hash_prompt([(1, 100), (2, 30), (3, 50)], 64, first)
    assert len(first.hashes) == 3 and len(second.hashes) == 3
    assert second.hashes[:2] == first.hashes[:2]
    assert second.hashes[2] != first.hashes[2]  # block 2 was partial, now it is full
    assert second.tokens == 180


def test_hashes_are_int64_and_stable() -> None:
    hashed = hash_prompt([(42, 10)], 4)
    assert all(0 <= h < 2**63 for h in hashed.hashes)
    # Fixed values: hashing must not depend on the process (no salted hash()).
    assert hashed.hashes == [5221820693497453428, 6258971305874631730, 880039506069404696]
    assert hashed.hashes == [
        hash_prompt([(42, 4)], 4).hashes[0],
        hash_prompt([(42, 8)], 4).hashes[1],
        hash_prompt([(42, 10)], 4).hashes[2],
    ]
