"""The scorer (`service.simulate.scoring.score`): matching by service and window,
attribution, cause and group, duplicates counted as extras, late first reports."""

from __future__ import annotations

from typing import Any

from service.simulate.builders import ExpectedChange
from service.simulate.scenario import DEFAULT_START
from service.simulate.scoring import score
from service.simulate.timefmt import TsFormatter

FMT = TsFormatter(DEFAULT_START)
START_S = DEFAULT_START.timestamp()
HOUR = 3600.0


def expected(at_h: float, **fields: Any) -> ExpectedChange:
    values: dict[str, Any] = {
        "service": "svc",
        "model": "m",
        "at_s": at_h * HOUR,
        "ts": FMT(at_h * HOUR),
        "effect": "regression",
        "kind": "deploy",
        "deploy": "v2",
        "replicas": None,
        "cause": "prefix_instability",
        "until_s": None,
        "until_ts": None,
        "description": "test",
    }
    return ExpectedChange(**(values | fields))


def found(at_h: float, rid: int = 1, **fields: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "id": rid,
        "service": "svc",
        "model": "m",
        "change_ts": FMT(at_h * HOUR),
        "cause": "prefix_instability",
        "group": None,
        "attributed_to": {"kind": "deploy", "deploy": "v2", "replicas": None, "source": "posted"},
        "before": {"hit_rate": 0.8},
        "after": {"hit_rate": 0.3},
    }
    return values | fields


def test_a_report_within_the_window_matches() -> None:
    outcome = score([found(10.4)], [expected(10.0)])
    assert (outcome.matched, outcome.attributed, outcome.caused, outcome.grouped) == (1, 1, 1, 1)
    assert outcome.precision == outcome.recall == 1.0 and not outcome.wrong
    late = score([found(10.6)], [expected(10.0)])
    assert late.matched == 0 and len(late.misses) == 1 and len(late.extras) == 1
    other = score([found(10.0, service="other")], [expected(10.0)])
    assert other.matched == 0


def test_windows_are_per_expectation() -> None:
    slow = expected(10.0, window_after_s=36 * HOUR, kind=None, deploy=None, cause="eviction")
    hit = found(40.0, cause="eviction", attributed_to=None)
    outcome = score([hit], [slow])
    assert outcome.matched == outcome.attributed == 1
    # kind None: attributed right only to no event.
    assert score([found(40.0, cause="eviction")], [slow]).attributed == 0
    assert score([found(9.0)], [expected(10.0, window_before_s=0.0)]).matched == 0


def test_a_second_report_of_one_change_is_an_extra() -> None:
    outcome = score([found(10.0, 1), found(10.2, 2)], [expected(10.0)])
    assert outcome.matched == 1 and outcome.duplicates == 1 and outcome.found == 2
    assert outcome.precision == 0.5
    assert "duplicate of svc" in outcome.extras[0]


def test_a_report_of_the_same_cause_while_it_lasts_is_a_duplicate() -> None:
    cut = expected(10.0, kind="config", deploy=None, cause="eviction", until_s=15 * HOUR)
    first = found(10.0, 1, cause="eviction", attributed_to={"kind": "config"})
    tenant = found(14.0, 2, cause="eviction", group={"by": "tenant", "value": "t-1"})
    other = found(14.0, 3, cause="expiry")
    after = found(16.0, 4, cause="eviction")
    outcome = score([first, tenant, other, after], [cut])
    assert outcome.matched == 1 and outcome.duplicates == 1 and len(outcome.extras) == 3
    erosion = expected(10.0, kind=None, cause="eviction", window_after_s=36 * HOUR)
    daily = [found(10.0 + 24 * d, d, cause="eviction", attributed_to=None) for d in range(4)]
    assert score(daily, [erosion]).duplicates == 3


def test_groups() -> None:
    tenant = expected(10.0, group=("tenant", "t-7"), kind="config", deploy=None)
    grouped = found(10.0, group={"by": "tenant", "value": "t-7"}, attributed_to={"kind": "config"})
    service = found(10.1, 2, attributed_to={"kind": "config"})
    outcome = score([service, grouped], [tenant])
    # The report of the tenant wins; the service's is a duplicate.
    assert outcome.matched == outcome.grouped == 1 and outcome.duplicates == 1
    assert outcome.matches[0][1] is grouped
    wrong = score([service], [tenant])
    assert wrong.matched == 1 and wrong.grouped == 0 and "tenant=t-7" in wrong.wrong[0]


def test_a_canary_accepts_the_service_level_report() -> None:
    canary = expected(
        10.0, group=("deploy", "v2"), service_level_ok=True, window_after_s=4.5 * HOUR
    )
    assert score([found(13.0)], [canary]).grouped == 1
    both = score([found(13.0, 1), found(10.0, 2, group={"by": "deploy", "value": "v2"})], [canary])
    assert both.matched == 1 and both.duplicates == 1 and both.matches[0][1]["id"] == 2


def test_late_first_report() -> None:
    slow = expected(10.0, report_by_s=40 * HOUR)
    on_time = score([found(10.0)], [slow], {1: START_S + 40 * HOUR})
    assert on_time.late == 0 and not on_time.wrong
    late = score([found(10.0)], [slow], {1: START_S + 48 * HOUR})
    assert late.late == 1 and late.wrong[0].startswith("late by 8.0 h")


def test_extras_carry_a_note() -> None:
    outcome = score([found(3.0)], [], note=lambda f: "night")
    assert outcome.extras[0].endswith("(night)") and outcome.precision == 0.0
