"""Tenants (`Service.tenants`): each session belongs to one, drawn by Zipf-like or
given weights; its records (a fanned-out task's calls too) name it; 50,000 tenants
of sparse traffic cost nothing."""

import time
from collections import Counter, defaultdict
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from service.ingest.records import UsageRecordIn
from service.simulate import (
    Change,
    DailyCurve,
    Fanout,
    LengthDist,
    PromptStructure,
    Scenario,
    Service,
    SimulationResult,
    Tenants,
    simulate,
)
from service.simulate.traffic import TenantDraws

HOUR = 3600.0


def scenario(tenants: Tenants | None, hours: float = 1.0, peak_rate: float = 3.0) -> Scenario:
    service = Service(
        name="assistant",
        model="m",
        prompt=PromptStructure(
            system_tokens=500,
            query=LengthDist(100, 0.5, 5, 1000),
            reply=LengthDist(150, 0.5, 5, 1000),
            turns_mean=3,
            think_time_s=LengthDist(20, 0.5, 2, 300),
        ),
        peak_rate=peak_rate,
        curve=DailyCurve.flat(),
        block_size=64,
        tenants=tenants,
    )
    fanout = Change(0.2 * HOUR, "assistant", Fanout(k=3, context_tokens=300, share=0.2))
    return Scenario("tenants", (service,), hours * HOUR, (fanout,), seed=4)


def by_session(records: list[dict[str, Any]]) -> dict[str, str]:
    tenants: dict[str, set[str]] = defaultdict(set)
    for record in records:
        if "session_id" in record:
            tenants[record["session_id"]].add(record["tenant"])
    assert all(len(names) == 1 for names in tenants.values())
    return {sid: next(iter(names)) for sid, names in tenants.items()}


@pytest.fixture(scope="module")
def zipf() -> SimulationResult:
    return simulate(scenario(Tenants(40, zipf_s=1.0)))


def test_each_session_keeps_one_tenant_drawn_by_zipf_weights(zipf: SimulationResult) -> None:
    sessions = Counter(by_session(zipf.records).values())
    total = sum(sessions.values())
    weights = 1.0 / np.arange(1, 41)
    expected = weights / weights.sum()
    assert total > 2000
    for k in (1, 2, 5, 10):
        share = sessions[f"tenant-{k:02d}"] / total
        assert share == pytest.approx(expected[k - 1], abs=0.02), (k, share)
    assert set(sessions) <= {f"tenant-{k:02d}" for k in range(1, 41)}


def test_every_record_names_its_tenant_and_ingest_reads_it(zipf: SimulationResult) -> None:
    sessions = by_session(zipf.records)
    calls = [r for r in zipf.records if "session_id" not in r]
    assert calls and all(r["tenant"].startswith("tenant-") for r in calls)
    # A task's calls carry their session's id as cache key, and its tenant.
    assert all(sessions[call["cache_key"]] == call["tenant"] for call in calls)
    for record in zipf.records[:200]:
        assert UsageRecordIn.model_validate(record).tenant == record["tenant"]


def test_given_shares_hold() -> None:
    run = simulate(scenario(Tenants(shares=(6.0, 3.0, 1.0), prefix="acme-")))
    sessions = Counter(by_session(run.records).values())
    total = sum(sessions.values())
    assert set(sessions) == {"acme-1", "acme-2", "acme-3"}
    for name, share in (("acme-1", 0.6), ("acme-2", 0.3), ("acme-3", 0.1)):
        assert sessions[name] / total == pytest.approx(share, abs=0.03)


def test_tenants_leave_the_other_draws_of_the_run_as_they_were() -> None:
    """A stream of their own: the same requests, only named."""
    without = simulate(scenario(None, hours=0.5))
    named = simulate(scenario(Tenants(1000), hours=0.5))
    assert all("tenant" not in r for r in without.records)
    stripped = [{k: v for k, v in r.items() if k != "tenant"} for r in named.records]
    assert stripped == without.records


def test_fifty_thousand_tenants_of_sparse_traffic_run_fast() -> None:
    many = Tenants(50_000, zipf_s=1.1)
    started = time.perf_counter()
    draws = TenantDraws(many, np.random.default_rng(1))
    names = [draws() for _ in range(200_000)]
    drawn = time.perf_counter() - started
    counts = Counter(names)
    assert drawn < 2.0, drawn
    assert len(counts) > 15_000  # a long tail: most tenants are rare
    top = counts.most_common(20)
    harmonic = float(np.sum(np.arange(1, 50_001, dtype=np.float64) ** -1.1))
    assert top[0] == ("tenant-00001", pytest.approx(200_000 / harmonic, rel=0.05))
    assert all(name.startswith("tenant-") and len(name) == 12 for name in counts)

    started = time.perf_counter()
    run = simulate(replace(scenario(many, hours=2.0), name="many"))
    elapsed = time.perf_counter() - started
    tenants = {r["tenant"] for r in run.records}
    assert len(run.records) > 15_000 and len(tenants) > 2_000
    assert elapsed < 10.0, elapsed  # about 1 s on a 2-core machine


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"count": 0}, "at least one tenant"),
        ({"zipf_s": -1.0}, "zipf_s must be >= 0"),
        ({"shares": (1.0, 0.0)}, "shares must be > 0"),
    ],
)
def test_tenants_are_checked(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Tenants(**options)


def test_tenant_names_are_zero_padded_to_the_count() -> None:
    assert Tenants(50_000).name(7) == "tenant-00007"
    assert Tenants(shares=(1.0,) * 12, prefix="ws").name(3) == "ws03"
    assert Tenants(9).size == 9 and Tenants(shares=(1.0, 2.0)).size == 2
