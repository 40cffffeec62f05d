"""The managed provider's prompt cache: minimum, reads and writes, TTL refreshed
on use, readiness after prefill, bounded memory, and the `usage` object ingest
reads back."""

import pytest

from service.ingest.records import UsageRecordIn
from service.simulate.managed import PromptCache, Served, anthropic_usage, split_prompt

BLOCK = 256
FIVE_MIN, HOUR = 300.0, 3600.0


def blocks(*ids: int) -> list[int]:
    return list(ids)


def use(
    cache: PromptCache,
    hashes: list[int],
    prompt: int,
    now: float,
    ttl_s: float = FIVE_MIN,
    ttft_s: float = 0.5,
) -> Served:
    """One request as the engine sends it: read, then write once its TTFT is known."""
    served = cache.read(hashes, prompt, BLOCK, now)
    cache.write(hashes, served, BLOCK, now, now + ttft_s, ttl_s)
    return served


def test_a_prompt_below_the_minimum_is_never_cached() -> None:
    cache = PromptCache(min_prompt_tokens=1024)
    short = blocks(1, 2, 3, 4)  # 1,000 tokens
    assert use(cache, short, 1000, 0.0) == Served(read=0, written=0, uncached=1000)
    assert use(cache, short, 1000, 10.0) == Served(read=0, written=0, uncached=1000)
    assert len(cache) == 0
    # The same start in a longer prompt is written (and then read) normally.
    long = blocks(1, 2, 3, 4, 5)
    assert use(cache, long, 1200, 20.0) == Served(read=0, written=1200, uncached=0)
    assert use(cache, long, 1200, 30.0) == Served(read=1200, written=0, uncached=0)


def test_a_request_reads_the_cached_prefix_and_writes_the_rest() -> None:
    cache = PromptCache(min_prompt_tokens=1024)
    first = blocks(1, 2, 3, 4, 5)  # 1,200 tokens, the last block partial
    use(cache, first, 1200, 0.0)
    # The next turn extends it: blocks 1-4 are shared, its block 5 is a full one.
    second = blocks(1, 2, 3, 4, 6, 7, 8)
    assert use(cache, second, 1700, 60.0) == Served(read=1024, written=676, uncached=0)


def test_an_entry_lives_its_ttl_after_its_last_use() -> None:
    cache = PromptCache(min_prompt_tokens=0)
    prefix = blocks(1, 2, 3, 4)
    use(cache, prefix, 1024, 0.0)
    assert use(cache, prefix, 1024, 250.0).read == 1024  # within 5 minutes: refreshed
    assert use(cache, prefix, 1024, 540.0).read == 1024  # 290 s after the last use
    assert use(cache, prefix, 1024, 850.0) == Served(read=0, written=1024, uncached=0)


def test_the_ttl_is_the_one_each_use_asked_for() -> None:
    cache = PromptCache(min_prompt_tokens=0)
    prefix = blocks(1, 2, 3, 4)
    use(cache, prefix, 1024, 0.0, ttl_s=HOUR)
    assert use(cache, prefix, 1024, 600.0, ttl_s=HOUR).read == 1024  # ten minutes later
    # A 5-minute request refreshes it for 5 minutes: ten minutes on, it has expired.
    assert use(cache, prefix, 1024, 1200.0, ttl_s=FIVE_MIN).read == 1024
    assert use(cache, prefix, 1024, 1800.0, ttl_s=FIVE_MIN).read == 0


def test_a_write_is_readable_only_once_its_request_has_begun_to_answer() -> None:
    cache = PromptCache(min_prompt_tokens=0)
    prefix = blocks(1, 2, 3, 4)
    use(cache, prefix, 1024, 0.0, ttft_s=2.0)
    # Sent together: the second request writes the prefix too.
    assert use(cache, prefix, 1024, 1.0).written == 1024
    # The first writer's ready time stands (whoever computes first wins).
    assert cache.lookup(prefix, 2.0) == 4
    assert cache.lookup(prefix, 1.9) == 0


def test_expired_entries_are_forgotten() -> None:
    cache = PromptCache(min_prompt_tokens=0)
    for i in range(100):
        use(cache, blocks(10 * i + 1, 10 * i + 2), 512, float(i))
    assert len(cache) == 200
    use(cache, blocks(5000, 5001), 512, 100.0 + FIVE_MIN + 0.5)
    assert len(cache) < 10


def test_split_prompt() -> None:
    assert split_prompt(900, 3, BLOCK, 1024) == Served(0, 0, 900)
    assert split_prompt(1100, 3, BLOCK, 1024) == Served(768, 332, 0)
    assert split_prompt(1100, 5, BLOCK, 1024) == Served(1100, 0, 0)  # a partial last block


@pytest.mark.parametrize(
    ("served", "ttl_s"),
    [(Served(4096, 1100, 0), FIVE_MIN), (Served(4096, 1100, 0), HOUR), (Served(0, 0, 700), HOUR)],
)
def test_the_usage_object_reads_back_as_the_request_was_served(
    served: Served, ttl_s: float
) -> None:
    usage = anthropic_usage(served, ttl_s, output_tokens=80)
    record = {"request_id": "r", "ts": 0, "service": "s", "model": "m", "usage": usage}
    parsed = UsageRecordIn.model_validate(record)  # what ingest makes of it
    assert parsed.prompt_tokens == served.prompt_tokens
    assert parsed.cached_tokens == served.read
    assert parsed.completion_tokens == 80
    assert usage["cache_creation_input_tokens"] == served.written
    split = usage["cache_creation"]
    long_writes = served.written if ttl_s == HOUR else 0
    assert split == {
        "ephemeral_5m_input_tokens": served.written - long_writes,
        "ephemeral_1h_input_tokens": long_writes,
    }
