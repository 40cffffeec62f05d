"""The seasonal world (`service.simulate.world`): deterministic per seed, its truth
lists the regressions it injects with sensible windows, and what it injects does
what the truth says in the simulated data (a few hours around each change, never
the two weeks). Also the simulator extensions it needs: tenant-scoped prompt
changes, short cache reads, agent sessions."""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from service.profiles.builtins import built_in
from service.simulate import (
    Change,
    DailyCurve,
    DynamicSystemPrefix,
    KvBudget,
    LengthDist,
    PromptStructure,
    Rendering,
    Scenario,
    Service,
    Tenants,
    detection_week,
    iter_records,
    scenario_events,
    token_counts,
    ttl_release_story,
)
from service.simulate.builders import ExpectedChange
from service.simulate.cli import app
from service.simulate.replay import ReplayConfig, _deadlines, left_band_s, replay_world
from service.simulate.scenario import AgentSession, Deploy, HistoryRewrite
from service.simulate.world import KV_FITS_PEAK_PER_RATE, World, seasonal_world, window
from service.simulate.world_story import DECOY_GAP_S, DECOY_SERVICES
from tests.simulate.analysis import parse_ts_s

MIN = 60.0
HOUR = 3600.0
DAY = 86_400.0
SEEDS = range(5)


@pytest.fixture(scope="module")
def worlds() -> dict[int, World]:
    return {seed: seasonal_world(seed) for seed in SEEDS}


def truth(world: World, service: str) -> ExpectedChange:
    (found,) = [e for e in world.expected if e.service == service]
    return found


def truths(world: World, service: str) -> list[ExpectedChange]:
    return [e for e in world.expected if e.service == service]


def rates(
    records: Iterable[dict[str, Any]], origin: float, spans: dict[str, tuple[float, float]]
) -> dict[str, tuple[float, float]]:
    """Hit rate and cacheable fraction (reuse within the hour, as contract section 4
    defines it) of each named span (seconds since `origin`)."""
    seen: dict[tuple[str, int], float] = {}
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    for record in records:
        t = parse_ts_s(record["ts"]) - origin
        run = 0
        for h in record["block_hashes"]:
            last = seen.get((record["model"], h))
            if last is None or t - last > HOUR:
                break
            run += 1
        for h in record["block_hashes"]:
            seen[(record["model"], h)] = t
        prompt, cached = token_counts(record)
        for name, (lo, hi) in spans.items():
            if lo <= t < hi:
                s = sums[name]
                s[0] += prompt
                s[1] += cached
                s[2] += min(prompt, run * record["block_size"])
    return {name: (s[1] / s[0], s[2] / s[0]) for name, s in sums.items()}


# -- the world's shape and its truth ------------------------------------------------


def test_world_is_deterministic_per_seed(worlds: dict[int, World]) -> None:
    again = seasonal_world(3)
    assert again.scenario == worlds[3].scenario
    assert again.expected == worlds[3].expected and again.benign == worlds[3].benign
    assert worlds[3].expected != worlds[4].expected
    assert worlds[3].scenario.services != worlds[4].scenario.services
    # And so are its records (an hour of two services).
    one = window(worlds[3].scenario, ["assistant", "support-bot"], 10 * HOUR, 11 * HOUR)
    digests = {hashlib.sha256(b"".join(orjson.dumps(r) for r in iter_records(one))).hexdigest()}
    digests.add(hashlib.sha256(b"".join(orjson.dumps(r) for r in iter_records(one))).hexdigest())
    assert len(digests) == 1


def test_world_shape(worlds: dict[int, World]) -> None:
    world = worlds[0]
    sc = world.scenario
    assert sc.start.weekday() == 0 and sc.start.hour == 0 and world.days == 14.0
    assert len(sc.services) == 8
    models = [s.model for s in sc.services]
    assert len(set(models)) == 5 and len(models) > len(set(models))
    managed = [s for s in sc.services if s.managed is not None]
    hosted = [s for s in sc.services if s.managed is None]
    assert len(managed) == 3 and len(hosted) == 5
    anthropic = built_in("anthropic")
    assert anthropic is not None
    for s in managed:
        assert s.managed is not None and s.managed.min_prompt_tokens == 1024
        assert anthropic.min_tokens_for(s.model) == 1024
    assert sum(s.managed.ttl == "5m" for s in managed if s.managed) == 2
    assert {s.routing for s in hosted if s.replicas > 1} == {"prefix_affinity"}
    assert all(
        0.05 <= s.curve.night <= 0.15 and 0.25 <= s.curve.weekend <= 0.5 for s in sc.services
    )
    big = [s for s in sc.services if s.tenants is not None and s.tenants.size >= 50]
    assert len(big) >= 3
    assert {len(s.renderings) for s in sc.services} >= {0, 2, 3}
    assert sum(s.read_miss_rate > 0 for s in sc.services) >= 3


def test_truth_lists_every_regression(worlds: dict[int, World]) -> None:
    for world in worlds.values():
        causes = sorted((e.service, e.cause, e.kind) for e in world.expected)
        assert causes == [
            ("assistant", "prefix_instability", "deploy"),
            ("code-review", "eviction", None),
            ("research-assistant", "expiry", "deploy"),
            ("search-agent", "prefix_instability", "deploy"),
            ("search-agent", "prefix_instability", "deploy"),
            ("sql-copilot", "eviction", "config"),
            ("sql-copilot", "routing", "replicas"),
            ("support-bot", "prefix_instability", "config"),
            ("ticket-triage", "prefix_instability", "deploy"),
        ]
        for e in world.expected:
            assert e.effect == "regression" and e.window_before_s == 1800.0
            if e.service not in {"search-agent", "code-review"}:
                assert e.window_after_s == 1800.0
            assert e.until_s is None or e.until_s > e.at_s
            assert e.kind != "deploy" or e.deploy is not None


def test_prefix_break_and_ttl_release_in_working_hours(worlds: dict[int, World]) -> None:
    for world in worlds.values():
        for e in (truth(world, "assistant"), truth(world, "research-assistant")):
            day, hour = divmod(e.at_s / HOUR, 24)
            assert day % 7 < 5 and 9 <= hour <= 16
            assert e.until_s is not None and 20 * HOUR <= e.until_s - e.at_s <= 48 * HOUR


def test_staged_rollout_is_its_canary_and_then_the_whole_service(
    worlds: dict[int, World],
) -> None:
    """As the demo's canary: the 10% canary is one regression (its tag's group), the
    release reaching most of the service (50%, then 100%) another, of the service."""
    for world in worlds.values():
        canary, everyone = sorted(
            (e for e in world.expected if e.service == "search-agent"), key=lambda e: e.at_s
        )
        assert canary.group == ("deploy", canary.deploy) and not canary.service_level_ok
        assert everyone.group is None and everyone.deploy == canary.deploy
        stages = [c for c in world.scenario.timeline if c.deploy == canary.deploy]
        assert [c.share for c in stages] == [0.1, 0.5, 1.0]
        assert (stages[0].at_s, stages[1].at_s) == (canary.at_s, everyone.at_s)
        assert everyone.window_after_s == stages[-1].at_s - everyone.at_s + 1800.0
        assert 3.5 * HOUR <= stages[-1].at_s - canary.at_s <= 4.5 * HOUR


def test_friday_regression_is_rolled_back_to_the_previous_tag(worlds: dict[int, World]) -> None:
    for world in worlds.values():
        e = truth(world, "ticket-triage")
        day, hour = divmod(e.at_s / HOUR, 24)
        assert day % 7 == 4 and 13 <= hour <= 16
        assert e.until_s == pytest.approx(e.at_s + 40 * MIN)
        tagged = [c for c in world.scenario.timeline if c.service == e.service and c.deploy]
        i = next(i for i, c in enumerate(tagged) if c.at_s == e.at_s)
        before = tagged[i - 1].deploy if i else world.scenario.service(e.service).deploy
        assert tagged[i + 1].at_s == e.until_s and tagged[i + 1].deploy == before


def test_tenant_break_is_posted_as_a_config_event(worlds: dict[int, World]) -> None:
    for world in worlds.values():
        e = truth(world, "support-bot")
        assert e.group is not None and e.group[0] == "tenant" and e.kind == "config"
        events = [ev for ev in scenario_events(world.scenario) if ev["ts"] == e.ts]
        assert [(ev["kind"], ev["service"]) for ev in events] == [("config", "support-bot")]
        assert e.group[1] in events[0]["description"]


def test_erosion_is_one_regression_without_event(worlds: dict[int, World]) -> None:
    for world in worlds.values():
        e = truth(world, "code-review")
        assert 8 * DAY + 6 * HOUR <= e.at_s <= 8 * DAY + 10.5 * HOUR and e.until_s is None
        assert e.window_after_s == 1.5 * DAY
        steps = [
            c
            for c in world.scenario.timeline
            if c.service == "code-review" and isinstance(c.action, KvBudget)
        ]
        budgets = [
            c.action.tokens_per_replica or 0 for c in steps if isinstance(c.action, KvBudget)
        ]
        assert all(c.post is False for c in steps) and e.at_s in [c.at_s for c in steps]
        assert budgets == sorted(budgets, reverse=True) and len(budgets) > 250
        assert 6.5 * DAY < steps[0].at_s < 7.5 * DAY  # shrinking within its headroom first
        daily = (budgets[-1] / budgets[0]) ** (DAY / (steps[-1].at_s - steps[0].at_s))
        assert 0.77 < daily < 0.83  # a working set growing 22-28% a day
        service = world.scenario.service("code-review")
        fits = service.peak_rate * KV_FITS_PEAK_PER_RATE
        assert service.kv_tokens is not None and budgets[0] == service.kv_tokens // 256 * 256
        at_truth = next(b for c, b in zip(steps, budgets, strict=True) if c.at_s == e.at_s)
        assert 0.97 * fits < at_truth <= fits


def test_sql_copilot_scale_out_and_budget_cut(worlds: dict[int, World]) -> None:
    for world in worlds.values():
        scale, cut = truths(world, "sql-copilot")
        assert scale.replicas == 4 and scale.kind == "replicas"
        events = scenario_events(world.scenario)
        assert not [ev for ev in events if ev["ts"] == scale.ts]  # seen only in the records
        assert [ev["kind"] for ev in events if ev["ts"] == cut.ts] == ["config"]


def test_decoys_every_day_away_from_real_changes(worlds: dict[int, World]) -> None:
    for world in worlds.values():
        decoys = [b for b in world.benign if b.label == "decoy"]
        per_day = {(b.service, int(b.at_s // DAY)) for b in decoys}
        assert len(per_day) >= 0.95 * 14 * len(DECOY_SERVICES)
        assert any((b.at_s / HOUR) % 24 >= 19 for b in decoys)  # evenings too
        models = {s.name: s.model for s in world.scenario.services}
        for e in world.expected:
            for b in decoys:
                if models[b.service] == e.model:
                    assert abs(b.at_s - e.at_s) >= DECOY_GAP_S
        tags = [c.deploy for c in world.scenario.timeline if isinstance(c.action, Deploy)]
        assert all(t is not None for t in tags)


def test_benign_happenings(worlds: dict[int, World]) -> None:
    for world in worlds.values():
        glitches = [b for b in world.benign if b.label == "glitch"]
        assert [g.until_s - g.at_s for g in glitches] == [300.0, 300.0]
        (session,) = [b for b in world.benign if b.label == "agent-session"]
        day, hour = divmod(session.at_s / HOUR, 24)
        assert day in (6, 13) and 7 <= hour <= 10
        assert 15 * MIN <= session.until_s - session.at_s <= 30 * MIN


# -- what the changes do to the simulated data -----------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_friday_regression_drops_about_0_2_for_40_minutes(
    worlds: dict[int, World], seed: int
) -> None:
    world = worlds[seed]
    e = truth(world, "ticket-triage")
    start = e.at_s - 2 * HOUR
    sc = window(world.scenario, ["ticket-triage"], start, e.at_s + 2 * HOUR)
    spans = {
        "before": (HOUR, 2 * HOUR),
        "during": (2 * HOUR + 2 * MIN, 2 * HOUR + 40 * MIN),
        "after": (2 * HOUR + 45 * MIN, 4 * HOUR),
    }
    spans |= {f"q{i}": (2 * HOUR + i * 10 * MIN, 2 * HOUR + (i + 1) * 10 * MIN) for i in range(6)}
    got = rates(iter_records(sc), sc.start.timestamp(), spans)
    (hit, cf), (hit_d, cf_d), (hit_a, _) = got["before"], got["during"], got["after"]
    assert 0.68 < hit < 0.77 and 0.73 < cf < 0.81
    assert 0.15 < hit - hit_d < 0.28 and 0.15 < cf - cf_d < 0.3
    assert abs(hit_a - hit) < 0.03
    # Every 10 minutes of the 40 are down; the 10 after the rollback are not.
    assert all(got[f"q{i}"][0] < hit - 0.1 for i in range(4))
    assert all(got[f"q{i}"][0] > hit - 0.05 for i in (5,))


def test_glitch_lasts_five_minutes(worlds: dict[int, World]) -> None:
    world = worlds[0]
    glitch = next(b for b in world.benign if b.label == "glitch" and b.service == "assistant")
    sc = window(world.scenario, ["assistant"], glitch.at_s - 90 * MIN, glitch.at_s + 40 * MIN)
    t0 = 90 * MIN
    spans = {
        "before": (30 * MIN, t0),
        "glitch": (t0 + 20, t0 + 5 * MIN - 20),
        "after": (t0 + 6 * MIN, t0 + 40 * MIN),
    }
    got = rates(iter_records(sc), sc.start.timestamp(), spans)
    assert got["glitch"][0] < 0.1 < got["before"][0] - 0.5
    assert got["after"][0] > got["before"][0] - 0.05


@pytest.mark.parametrize("seed", [0, 1])
def test_erosion_takes_the_peak_from_0_94_to_about_0_5_by_friday(
    worlds: dict[int, World], seed: int
) -> None:
    world = worlds[seed]
    peaks = {}
    for day in (7, 11):  # Monday before, Friday after
        sc = window(world.scenario, ["code-review"], day * DAY + 10 * HOUR, day * DAY + 16 * HOUR)
        peaks[day] = rates(iter_records(sc), sc.start.timestamp(), {"peak": (HOUR, 6 * HOUR)})
    assert peaks[7]["peak"][0] > 0.92
    assert 0.4 < peaks[11]["peak"][0] < 0.72
    assert peaks[11]["peak"][1] > 0.9  # still cacheable: evicted, not broken


def test_left_band() -> None:
    week = 168
    hourly = {("svc", h): [100, 1000, 940] for h in range(2 * week)}
    assert left_band_s(hourly, "svc", 0.0) is None
    hourly[("svc", week + 20)] = [100, 1000, 800]
    hourly[("svc", week + 21)] = [100, 1000, 800]
    assert left_band_s(hourly, "svc", 0.0) is None  # 0.14 below 0.94: under 20% of it
    hourly[("svc", week + 30)] = [100, 1000, 700]
    assert left_band_s(hourly, "svc", 0.0) is None  # one hour is no departure
    hourly[("svc", week + 31)] = [100, 1000, 700]
    hourly[("svc", week + 40)] = [5, 1000, 100]  # too few requests to count
    assert left_band_s(hourly, "svc", 0.0) == (week + 31) * HOUR


def test_a_groups_truth_reaches_its_first_request_after_the_change(
    worlds: dict[int, World],
) -> None:
    """A sparse tenant's next request an hour after its change is the first that can
    show it: a report dated at that request's bucket matches."""
    world = worlds[0]
    tenant = next(e for e in world.expected if e.group and e.group[0] == "tenant")
    key = (tenant.service, *tenant.group)

    def window(first_after: dict[tuple[str, str, str], float]) -> float:
        (got,) = [
            e
            for e in _deadlines(world, {}, 2 * DAY, first_after)
            if (e.group, e.at_s) == (tenant.group, tenant.at_s)
        ]
        return got.window_after_s

    assert window({key: tenant.at_s + HOUR}) == HOUR + 300
    assert window({}) == tenant.window_after_s


def test_agent_session_holds_most_of_a_quiet_sunday_morning(worlds: dict[int, World]) -> None:
    world = worlds[0]
    session = next(b for b in world.benign if b.label == "agent-session")
    start = session.at_s - HOUR
    sc = window(world.scenario, [session.service], start, session.until_s + HOUR)
    tokens: dict[bool, int] = defaultdict(int)
    times = []
    for record in iter_records(sc):
        t = parse_ts_s(record["ts"]) - sc.start.timestamp() + start
        agent = "-agent" in record.get("session_id", "")
        if agent:
            times.append(t)
        if session.at_s <= t < session.until_s:
            tokens[agent] += token_counts(record)[0]
    assert tokens[True] / (tokens[True] + tokens[False]) > 0.6
    assert 10 * MIN <= max(times) - min(times) <= 35 * MIN


# -- simulator extensions -------------------------------------------------------------


def small(**fields: Any) -> Service:
    base = Service(
        name="svc",
        model="m",
        prompt=PromptStructure(
            system_tokens=600,
            query=LengthDist(100, 0.5, 5, 1_000),
            reply=LengthDist(150, 0.5, 5, 1_000),
            turns_mean=4,
            think_time_s=LengthDist(20, 0.5, 2, 300),
        ),
        peak_rate=1.0,
        curve=DailyCurve.flat(),
        kv_tokens=None,
        block_size=64,
        tenants=Tenants(5, zipf_s=0.0),
    )
    return replace(base, **fields)


def test_tenant_change_touches_only_that_tenant() -> None:
    change = Change(1800.0, "svc", DynamicSystemPrefix("request"), tenant="tenant-3", post=True)
    sc = Scenario("tenant", (small(),), 3600.0, (change,), seed=2)
    first_blocks: dict[tuple[bool, bool], set[int]] = defaultdict(set)
    counts: dict[tuple[bool, bool], int] = defaultdict(int)
    for record in iter_records(sc):
        after = parse_ts_s(record["ts"]) - sc.start.timestamp() >= 1800.0
        key = (record["tenant"] == "tenant-3", after)
        first_blocks[key].add(record["block_hashes"][0])
        counts[key] += 1
    assert len(first_blocks[(True, True)]) == counts[(True, True)] > 50  # one start each
    assert len(first_blocks[(False, True)]) == 1 == len(first_blocks[(False, False)])
    assert (
        first_blocks[(False, True)] == first_blocks[(False, False)] == first_blocks[(True, False)]
    )
    (event,) = scenario_events(sc)
    assert event["kind"] == "config" and event["description"].startswith("tenant tenant-3:")


def test_tenant_change_is_validated() -> None:
    with pytest.raises(ValueError, match="prompt change"):
        Change(0.0, "svc", KvBudget(1024), tenant="tenant-1")
    with pytest.raises(ValueError, match="no deploy tag"):
        Change(0.0, "svc", DynamicSystemPrefix(), tenant="tenant-1", deploy="v2")
    for tenant in ("tenant-9", "other-1", "tenant-01"):
        sc = Scenario(
            "bad", (small(),), 60.0, (Change(0.0, "svc", DynamicSystemPrefix(), tenant=tenant),)
        )
        with pytest.raises(ValueError, match="has no tenant"):
            list(iter_records(sc))


#: The digest of these records before read_miss_rate, tenant changes and agent
#: sessions existed (computed at the commit before them): a run that uses none of
#: them must not change by a byte.
GOLDEN = (4543, "13a8fde6ad95b7e89a557f0d6c7666a096ec87019ca84e77322009770e7346c3")


def test_read_miss_rate_zero_leaves_output_unchanged() -> None:
    digest, n = hashlib.sha256(), 0
    for record in iter_records(detection_week(3, days=0.25).scenario):
        digest.update(orjson.dumps(record))
        n += 1
    svc, timeline = ttl_release_story(3600.0, 7200.0)
    svc = replace(
        svc,
        peak_rate=0.5,
        tenants=Tenants(20),
        renderings=(Rendering("a", 1.0), Rendering("b", 1.0, system_extra_tokens=3)),
    )
    for record in iter_records(Scenario("golden", (svc,), 3 * HOUR, timeline, seed=4)):
        digest.update(orjson.dumps(record))
        n += 1
    assert (n, digest.hexdigest()) == GOLDEN


@pytest.mark.parametrize("managed", [False, True])
def test_read_miss_rate_shortens_a_share_of_the_reads(managed: bool) -> None:
    """One replica, an unbounded cache, no concurrency: a request reads everything
    seen before, except with probability read_miss_rate."""
    short = {}
    for rate in (0.0, 0.2):
        svc = small(read_miss_rate=rate, peak_rate=0.3)
        if managed:
            svc, _ = ttl_release_story(1e9)
            svc = replace(svc, peak_rate=0.3, read_miss_rate=rate)
        seen: set[int] = set()
        shorter = reads = 0
        for record in iter_records(Scenario("miss", (svc,), 2 * HOUR, seed=5)):
            run = 0
            for h in record["block_hashes"]:
                if h not in seen:
                    break
                run += 1
            seen.update(record["block_hashes"])
            prompt, cached = token_counts(record)
            available = min(prompt, run * record["block_size"])
            if available >= record["block_size"]:
                reads += 1
                shorter += cached < available
        short[rate] = shorter / reads
    assert short[0.0] < 0.01
    assert 0.15 < short[0.2] < 0.25


def test_agent_session_runs_its_turns() -> None:
    agent = AgentSession(
        turns=12, think_time_s=LengthDist(10, 0.2, 5, 30), rewrite=HistoryRewrite(0.5)
    )
    sc = Scenario("agent", (small(peak_rate=0.05),), HOUR, (Change(600.0, "svc", agent),), seed=1)
    records = [r for r in iter_records(sc) if "-agent" in r["session_id"]]
    assert len(records) == 12
    assert parse_ts_s(records[0]["ts"]) - sc.start.timestamp() == pytest.approx(600.0)
    assert "tenant" not in records[0]
    prompts = [r["prompt_tokens"] for r in records]
    assert max(prompts) > 5 * prompts[0]  # tool results of about 4,000 tokens a turn
    assert scenario_events(sc) == []


def test_replay_ships_chunks_with_late_records_and_retries() -> None:
    """The bench's replay, short: three 2-hour chunks of a quiet night at a fifth of
    the traffic, each with a retried batch, a detection pass after each."""
    cfg = ReplayConfig(days=0.25, scale=0.2, chunk_hours=2.0, batch=200, late_share=0.02)
    result = replay_world(0, cfg)
    assert result.passes == 3 and result.stored == result.records > 600
    assert 0 < result.duplicates_sent <= 3 * cfg.batch
    assert result.score.expected == 0 and result.score.found == len(result.score.extras)
    assert result.timings.detect_s > 0 and result.timings.simulate_s > 0


def test_cli_runs_the_world(tmp_path: Path) -> None:
    out, expected = tmp_path / "r.ndjson", tmp_path / "x.json"
    # Two weeks are too long for a test: --days cuts the world short.
    args = ["run", "--scenario", "seasonal-world", "--days", "0.02", "--seed", "2"]
    result = CliRunner().invoke(app, [*args, "--out", str(out), "--expected-out", str(expected)])
    assert result.exit_code == 0, result.output
    services = {orjson.loads(line)["service"] for line in out.read_bytes().splitlines()}
    assert len(services) >= 6
    assert orjson.loads(expected.read_bytes()) == []  # no regression in its first half hour
