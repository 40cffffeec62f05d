"""The detection week: every injected problem is a large, lasting drop of the
hit rate (sum cached_tokens / sum prompt_tokens per 5-minute bucket), and the
no-effect deploy, the traffic doubling and the quiet nights are not."""

import time
from collections import defaultdict
from dataclasses import dataclass, replace

import numpy as np
import pytest

from service.ingest.records import UsageRecordIn
from service.services.events import EventIn
from service.simulate import (
    DetectionWeek,
    detection_week,
    iter_records,
    scenario_events,
)
from service.simulate.builders import PrefixProblem
from tests.simulate.analysis import Buckets, parse_ts_s

HOUR = 3600.0
DAY = 24 * HOUR
BUCKET = 300.0


@dataclass
class Week:
    week: DetectionWeek
    buckets: Buckets
    replicas_per_hour: dict[int, set[str]]
    deploys: set[str]
    seconds: float
    records: int


def run_week(week: DetectionWeek) -> Week:
    """Stream the records once, keeping only per-bucket sums."""
    scenario = week.scenario
    origin = scenario.start.timestamp()
    size = int(scenario.duration_s // BUCKET) + 1
    requests = np.zeros(size)
    prompt = np.zeros(size)
    cached = np.zeros(size)
    replicas: dict[int, set[str]] = defaultdict(set)
    deploys: set[str] = set()
    count = 0
    started = time.monotonic()
    for record in iter_records(scenario):
        if count % 5000 == 0:
            UsageRecordIn.model_validate(record)  # a sample against the contract
        count += 1
        t = parse_ts_s(record["ts"]) - origin
        b = int(t // BUCKET)
        requests[b] += 1
        prompt[b] += record["prompt_tokens"]
        cached[b] += record["cached_tokens"]
        replicas[int(t // HOUR)].add(record["replica"])
        deploys.add(record["deploy"])
    seconds = time.monotonic() - started
    buckets = Buckets(origin, BUCKET, requests, prompt, cached)
    return Week(week, buckets, replicas, deploys, seconds, count)


@pytest.fixture(scope="module")
def week() -> Week:
    return run_week(detection_week(seed=7))


def test_week_is_generated_quickly(week: Week) -> None:
    print(f"detection week: {week.records} records in {week.seconds:.1f} s")
    assert 250_000 < week.records < 700_000
    assert week.seconds < 120  # about 20-30 s on an idle 2-core machine


def test_changes_come_in_order_at_least_a_day_apart(week: Week) -> None:
    changes = [c for c in week.week.changes if c.effect != "recovery" or c.deploy == "v1.2.1"]
    assert [c.description.split()[0] for c in changes][:2] == ["release", "system"]
    times = [c.at_s for c in changes]
    assert times == sorted(times)
    assert min(np.diff(times)) >= DAY
    assert times[-1] < 7 * DAY
    for change in changes:
        hour = (change.at_s % DAY) / HOUR
        assert 9 <= hour <= 17, "changes happen in working hours"
    causes = [r.cause for r in week.week.regressions]
    assert causes == ["prefix_instability", "routing", "eviction", "cold_fanout"]


def test_every_injected_problem_is_a_large_lasting_drop(week: Week) -> None:
    b = week.buckets
    for regression in week.week.regressions:
        at = regression.at_s
        end = min(regression.until_s or at + 6 * HOUR, at + 3 * HOUR)
        before = b.window(at - 2 * HOUR, at)
        after = b.window(at + 600, end)
        label = f"{regression.description}: before {before:.3f}, after {after:.3f}"
        assert before - after >= 0.10, label
        assert (before - after) / before >= 0.20, label
        # Lasting: each hour after the change is down as much, not just the average.
        for h in range(int((end - at - 600) // HOUR)):
            hour = b.window(at + 600 + h * HOUR, at + 600 + (h + 1) * HOUR)
            assert before - hour >= 0.10 and (before - hour) / before >= 0.20, (label, h, hour)


def test_fixes_bring_the_hit_rate_back(week: Week) -> None:
    b = week.buckets
    for regression in week.week.regressions:
        assert regression.until_s is not None
        healthy = b.window(regression.at_s - 2 * HOUR, regression.at_s)
        back = b.window(regression.until_s + 1800, regression.until_s + 3 * HOUR)
        assert back > healthy - 0.03, (regression.description, healthy, back)


def test_noop_deploy_and_traffic_doubling_change_nothing(week: Week) -> None:
    b = week.buckets
    benign = week.week.benign
    assert [c.description for c in benign] == [
        "release with no serving or prompt change",
        "traffic x2",
    ]
    for change in benign:
        before = b.window(change.at_s - 2 * HOUR, change.at_s)
        after = b.window(change.at_s + 600, change.at_s + 2 * HOUR)
        assert abs(after - before) < 0.03, (change.description, before, after)
    doubling = benign[1].at_s
    after_rate = b.requests[b._range(doubling + 1800, doubling + 2 * HOUR)].mean()
    before_rate = b.requests[b._range(doubling - 2 * HOUR, doubling)].mean()
    assert after_rate > 1.6 * before_rate


def test_quiet_nights_are_quiet_but_not_a_drop(week: Week) -> None:
    b = week.buckets
    problems = [(r.at_s, r.until_s or 7 * DAY) for r in week.week.regressions]

    def healthy(a: float, z: float) -> bool:
        return all(z <= p0 or a >= p1 for p0, p1 in problems)

    # The reference: busy healthy daytime hours across the week.
    day_hours = [
        (d * DAY + h * HOUR, d * DAY + (h + 1) * HOUR) for d in range(7) for h in range(10, 18)
    ]
    daytime = [hour for hour in day_hours if healthy(*hour)]
    reference = float(np.median([b.window(*hour) for hour in daytime]))
    busy = float(np.median([b.requests[b._range(*hour)].mean() for hour in daytime]))
    checked = 0
    for day in range(7):
        night = (day * DAY + 1 * HOUR, day * DAY + 5 * HOUR)
        if not healthy(*night):
            continue
        checked += 1
        assert b.requests[b._range(*night)].mean() < 0.2 * busy, "nights are quiet"
        assert b.window(*night) > reference - 0.03, (day, b.window(*night), reference)
        # Hour by hour too (single night buckets hold few requests and are noisy).
        for h in range(4):
            start = night[0] + h * HOUR
            assert b.window(start, start + HOUR) > reference - 0.05, (day, h)
    assert checked >= 4


def test_scale_up_shows_only_in_the_records(week: Week) -> None:
    scale = next(r for r in week.week.regressions if r.cause == "routing")
    assert scale.kind == "replicas" and scale.replicas == 4
    hour = int(scale.at_s // HOUR)
    assert week.replicas_per_hour[hour - 1] == {"assistant-0"}
    assert len(week.replicas_per_hour[hour + 1]) == 4
    events = scenario_events(week.week.scenario)
    assert not [e for e in events if e["kind"] == "replicas"]


def test_posted_events_are_the_deploys_and_config_changes(week: Week) -> None:
    events = scenario_events(week.week.scenario)
    for event in events:
        EventIn.model_validate(event)
    kinds = [(e["kind"], e["deploy"]) for e in events]
    assert kinds == [
        ("deploy", "v1.1.0"),
        ("deploy", "v1.2.0"),
        ("deploy", "v1.2.1"),
        ("config", None),  # routing back to prefix affinity
        ("config", None),  # KV budget cut
        ("config", None),  # KV budget restored
        ("deploy", "v1.3.0"),
        ("deploy", "v1.3.1"),
    ]
    kv = next(r for r in week.week.regressions if r.cause == "eviction")
    assert kv.kind == "config" and kv.ts == events[4]["ts"]
    assert "KV cache budget" in events[4]["description"]
    assert week.deploys == {"v1.0.0", "v1.1.0", "v1.2.0", "v1.2.1", "v1.3.0", "v1.3.1"}


def test_seed_varies_timings_rates_and_magnitudes() -> None:
    a, b = detection_week(seed=1), detection_week(seed=2)
    assert [c.at_s for c in a.changes] != [c.at_s for c in b.changes]
    assert a.scenario.services[0].peak_rate != b.scenario.services[0].peak_rate
    assert a.scenario.services[0].prompt != b.scenario.services[0].prompt
    assert detection_week(seed=1) == a
    expected = a.regressions[0].to_dict()
    assert set(expected) >= {"ts", "kind", "deploy", "cause", "until_ts", "replicas"}


@pytest.mark.parametrize(
    ("problem", "cause"),
    [("shuffled_tools", "prefix_instability"), ("history_rewrite", "history_rewrite")],
)
def test_other_prefix_problems(problem: PrefixProblem, cause: str) -> None:
    week = detection_week(seed=3, days=3.0, prefix_problem=problem, problems=("prefix",))
    (regression,) = week.regressions
    assert regression.cause == cause and regression.deploy == "v1.2.0"
    at = regression.at_s
    # Only the hours around the change are needed.
    short = replace(week.scenario, duration_s=at + 3.5 * HOUR)
    b = run_week(replace(week, scenario=short)).buckets
    before = b.window(at - 2 * HOUR, at)
    after = b.window(at + 600, at + 3 * HOUR)
    assert before - after >= 0.10 and (before - after) / before >= 0.20, (before, after)
