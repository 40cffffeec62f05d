"""Blocks inferred from usage (`service.ingest.usage_blocks`): an append-only history
keeps its blocks, a pause past the TTL keeps them (expiry is the analytics' to
count), a start busted within the TTL changes them all, a history rewritten within
it changes them from the first block not read."""

from service.ingest.usage_blocks import Usage, UsageBlocks

T0 = 1_764_399_600.0


def hashes(blocks: UsageBlocks, key: str, usage: Usage) -> list[str] | None:
    inferred = blocks.blocks(key, usage)
    return None if inferred is None else inferred.block_hashes


def shared(a: list[str], b: list[str]) -> int:
    """How many leading block hashes two calls share."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def test_appending_and_pausing_keep_the_blocks() -> None:
    blocks = UsageBlocks(block_size=100)
    first = hashes(blocks, "s", Usage(T0, 1_000, 0, 1_000, 300))
    second = hashes(blocks, "s", Usage(T0 + 30, 1_500, 1_000, 500, 300))
    expired = hashes(blocks, "s", Usage(T0 + 30 + 600, 1_800, 0, 1_800, 300))
    assert first is not None and second is not None and expired is not None
    assert (len(first), len(second), len(expired)) == (10, 15, 18)
    assert second[:10] == first and expired[:15] == second
    assert shared(first, hashes(blocks, "other", Usage(T0, 1_000, 0, 1_000, 300)) or []) == 0


def test_a_busted_start_and_a_rewrite_within_the_ttl() -> None:
    blocks = UsageBlocks(block_size=100)
    before = hashes(blocks, "s", Usage(T0, 5_000, 0, 5_000, 300)) or []
    busted = hashes(blocks, "s", Usage(T0 + 10, 5_200, 0, 5_200, 300)) or []
    assert shared(before, busted) == 0
    compacted = hashes(blocks, "s", Usage(T0 + 20, 2_500, 2_000, 500, 300)) or []
    assert shared(busted, compacted) == 20  # what it read, then a new history
    appended = hashes(blocks, "s", Usage(T0 + 30, 2_900, 2_500, 400, 300)) or []
    assert appended[:25] == compacted


def test_the_one_hour_ttl_and_a_replayed_call() -> None:
    blocks = UsageBlocks(block_size=100)
    before = hashes(blocks, "s", Usage(T0, 5_000, 0, 5_000, 3_600)) or []
    later = hashes(blocks, "s", Usage(T0 + 900, 5_200, 0, 5_200, 300)) or []
    assert shared(before, later) == 0  # within the hour: the start changed
    assert hashes(blocks, "s", Usage(T0 + 5, 100, 0, 100, 300)) is None  # older than the last


def test_bounded() -> None:
    blocks = UsageBlocks(max_threads=2, block_size=100)
    first = hashes(blocks, "a", Usage(T0, 1_000, 0, 1_000, 300))
    hashes(blocks, "b", Usage(T0, 1_000, 0, 1_000, 300))
    hashes(blocks, "c", Usage(T0, 1_000, 0, 1_000, 300))
    # "a" was forgotten: its next call starts a thread again, with the same blocks
    # (a thread's hashes depend on its key and generation only).
    assert hashes(blocks, "a", Usage(T0 + 10, 1_000, 0, 1_000, 300)) == first


def test_the_start_segment_changes_with_the_start() -> None:
    blocks = UsageBlocks(block_size=100)
    first = blocks.blocks("s", Usage(T0, 5_000, 0, 5_000, 300))
    appended = blocks.blocks("s", Usage(T0 + 10, 5_200, 5_000, 200, 300))
    busted = blocks.blocks("s", Usage(T0 + 20, 5_400, 0, 5_400, 300))
    assert first is not None and appended is not None and busted is not None
    assert (
        first.start
        == appended.start
        == {"name": "system+tools", "hash": "start-0", "tokens": 5_000}
    )
    assert busted.start["hash"] != "start-0" and busted.start["tokens"] == 5_000
    other = blocks.blocks("t", Usage(T0, 4_000, 0, 4_000, 300))
    assert other is not None and other.start["hash"] == "start-0"  # nothing tells starts apart
