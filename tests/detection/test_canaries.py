"""Unit tests of service.detection.canaries: each newer deploy tag is compared with the
tag it replaced (the busiest in the last bucket before its first), so the comparison
is one pass over the tags' buckets whatever their number (contract section 5a,
issue 32)."""

from __future__ import annotations

import time

import numpy as np

from service.analytics.definitions import SUM_COLUMNS
from service.detection.canaries import canaries, replaced
from service.detection.changepoints import DropRule
from service.detection.series import Series

RULE = DropRule()  # a canary is found after 6 buckets beside its older tag
BUCKET_US = 300_000_000


def tag(first: int, buckets: int, hit_rate: float, tokens: int) -> Series:
    """A tag serving `buckets` 5-minute buckets from bucket `first`, at this hit rate
    and these prompt tokens each (a request per 1,000 tokens)."""
    n = buckets
    sums = {c: np.zeros(n, dtype=np.int64) for c in SUM_COLUMNS}
    sums["prompt_tokens"] = np.full(n, tokens, dtype=np.int64)
    sums["cached_tokens"] = np.full(n, int(hit_rate * tokens), dtype=np.int64)
    sums["requests"] = np.full(n, max(tokens // 1000, 1), dtype=np.int64)
    return Series(
        bucket_us=(first + np.arange(n, dtype=np.int64)) * BUCKET_US,
        sums=sums,
        distinct_prefixes=np.ones(n, dtype=np.int64),
        replicas=np.ones(n, dtype=np.int64),
    )


def test_a_second_canary_is_compared_with_the_release_not_with_the_first_canary() -> None:
    # v1 serves all day; v2 goes to 10% at bucket 24 (healthy, still serving) and v3
    # to 10% at bucket 36, broken: v3 replaced v1, the busiest before it.
    tags = {
        "v1": tag(0, 72, 0.8, 90_000),
        "v2": tag(24, 48, 0.8, 10_000),
        "v3": tag(36, 36, 0.1, 10_000),
    }
    assert replaced(tags) == {"v2": "v1", "v3": "v1"}
    (found,) = canaries(tags, RULE, BUCKET_US)
    assert (found.tag, found.baseline, found.buckets) == ("v3", "v1", 36)
    assert found.first_bucket_us == 36 * BUCKET_US
    assert 0.09 < found.share < 0.11


def test_a_canary_of_a_release_rolled_out_everywhere_is_compared_with_that_release() -> None:
    # v1 until bucket 24, then v2 everywhere; v3 a broken 10% canary beside v2.
    tags = {
        "v1": tag(0, 24, 0.8, 100_000),
        "v2": tag(24, 48, 0.8, 90_000),
        "v3": tag(60, 12, 0.1, 10_000),
    }
    assert replaced(tags) == {"v3": "v2"}  # v2 served beside no older tag
    (found,) = canaries(tags, RULE, BUCKET_US)
    assert (found.tag, found.baseline) == ("v3", "v2")
    # v3 served to the end beside v2: still open.
    assert found.recovered_at_us is None


def test_a_window_that_starts_mid_canary_compares_it_with_the_busier_tag() -> None:
    # Both tags serve from the window's first bucket: the smaller is the canary of the
    # busier, whichever name sorts first.
    tags = {"a-canary": tag(0, 24, 0.1, 10_000), "z-release": tag(0, 24, 0.8, 90_000)}
    assert replaced(tags) == {"z-release": "a-canary"}  # in order (first bucket, name)
    tags = {"a-release": tag(0, 24, 0.8, 90_000), "z-canary": tag(0, 24, 0.1, 10_000)}
    assert replaced(tags) == {"z-canary": "a-release"}
    (found,) = canaries(tags, RULE, BUCKET_US)
    assert (found.tag, found.baseline) == ("z-canary", "a-release")


def test_a_rolled_back_canary_is_recovered_when_it_stopped() -> None:
    tags = {"v1": tag(0, 48, 0.8, 90_000), "v2": tag(12, 12, 0.1, 10_000)}
    (found,) = canaries(tags, RULE, BUCKET_US)
    assert found.recovered_at_us == 24 * BUCKET_US


def test_5_000_tags_take_one_pass_over_their_buckets() -> None:
    # A build number per deploy: every 30 minutes for 100 days a new tag goes to 10%
    # of the requests beside the one before (6 buckets), then to everyone as the next
    # one starts beside it (6 buckets). Compared with every older tag, this took
    # minutes (each tag's buckets searched in every older tag's).
    count, stride = 5_000, RULE.min_buckets
    tags = {}
    for k in range(count):
        series = tag(k * stride, 2 * stride, 0.8, 90_000)
        series.sums["prompt_tokens"][:stride] = 10_000  # its canary's buckets
        series.sums["cached_tokens"][:stride] = 1_000 if k == count // 2 else 8_000
        tags[f"build-{k:05d}"] = series
    started = time.perf_counter()
    found = canaries(tags, RULE, BUCKET_US)
    took = time.perf_counter() - started
    (broken,) = found
    assert (broken.tag, broken.baseline) == (
        f"build-{count // 2:05d}",
        f"build-{count // 2 - 1:05d}",
    )
    assert took < 5, took  # about 0.5 s
