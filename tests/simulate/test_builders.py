"""The managed-API story: a release that sets a 5-minute cache TTL on traffic
whose users pause about ten minutes between turns."""

from typing import Any

import pytest

from service.simulate import Scenario, SimulationResult, simulate, token_counts, ttl_release_story
from service.simulate.scenario import DAY_S, DEFAULT_START
from tests.simulate.analysis import bucket_hit_rates, parse_ts_s

HOUR = 3600.0
RELEASE, FIX = DAY_S + 12 * HOUR, DAY_S + 16 * HOUR


@pytest.fixture(scope="module")
def story() -> SimulationResult:
    service, timeline = ttl_release_story(RELEASE, FIX)
    return simulate(Scenario("ttl", (service,), 2 * DAY_S, timeline, seed=5))


def test_the_hit_rate_falls_after_the_release_and_comes_back_after_the_fix(
    story: SimulationResult,
) -> None:
    buckets = bucket_hit_rates(story.records, 300.0, DEFAULT_START)
    before = buckets.window(RELEASE - 3 * HOUR, RELEASE)
    after = buckets.window(RELEASE + 0.5 * HOUR, FIX)
    fixed = buckets.window(FIX + 0.5 * HOUR, FIX + 3.5 * HOUR)
    assert before > 0.75
    assert after < before - 0.35
    assert abs(fixed - before) < 0.05
    # A lasting drop: every 5-minute bucket of the afternoon stays low.
    assert max(buckets.rates(RELEASE + 0.5 * HOUR, FIX)) < before - 0.2


def test_the_records_carry_the_provider_the_asked_ttl_and_the_writes(
    story: SimulationResult,
) -> None:
    asked = {r["deploy"]: r["cache_ttl_s"] for r in story.records}
    assert asked == {"v6.4.0": 3600.0, "v7.0.0": 300.0, "v7.0.1": 3600.0}
    assert {r["provider"] for r in story.records} == {"anthropic"}
    assert not any("replica" in r for r in story.records)
    writes = sum(r["usage"]["cache_creation_input_tokens"] for r in story.records)
    prompt = sum(token_counts(r)[0] for r in story.records)
    assert 0.05 < writes / prompt < 0.8
    events = [(e["kind"], e["deploy"]) for e in story.events]
    assert events == [("deploy", "v7.0.0"), ("deploy", "v7.0.1")]


def test_after_the_release_a_turn_ten_minutes_on_reads_only_the_shared_start(
    story: SimulationResult,
) -> None:
    """The premise of cause `expiry`: a continuing turn extends its previous turn
    (its prefix was seen within the hour: cacheable), but a pause past 5 minutes
    let the provider drop it; only the start all sessions share is still read."""
    service, _ = ttl_release_story(RELEASE, FIX)
    shared = service.prompt.static_tokens // service.block_size * service.block_size
    start = DEFAULT_START.timestamp()
    previous: dict[str, dict[str, Any]] = {}
    expired = kept = 0
    for record in story.records:
        t = parse_ts_s(record["ts"]) - start
        last = previous.get(record["session_id"])
        previous[record["session_id"]] = record
        if last is None or not RELEASE + 0.5 * HOUR < t < FIX:
            continue
        full = token_counts(last)[0] // service.block_size
        assert record["block_hashes"][:full] == last["block_hashes"][:full]
        if t - (parse_ts_s(last["ts"]) - start) > 300.0:
            expired += 1
            kept += token_counts(record)[1] > shared
    assert expired > 500
    assert kept <= 0.01 * expired
