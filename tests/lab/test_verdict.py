"""service.lab.verdict: the lab's checks fail when cachewatch says something else."""

from __future__ import annotations

from typing import Any

from service.lab.verdict import Window, check_agreement, check_regressions, phase_of

WINDOWS = [
    Window("healthy", 0, 300),
    Window("v2-timestamp", 300, 540),
    Window("v3-fix", 540, 780),
    Window("scale-4-round-robin", 840, 1140),
    Window("cache-aware", 1200, 1440),
]


def _iso(ts: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(ts, UTC).isoformat().replace("+00:00", "Z")


def regression(id_: int, change: float, cause: str, kind: str, resolved: float | None) -> Any:
    return {
        "id": id_,
        "service": "corporate-assistant",
        "group": None,
        "change_ts": _iso(change),
        "status": "resolved" if resolved is not None else "open",
        "resolved_at": None if resolved is None else _iso(resolved),
        "cause": cause,
        "attributed_to": {"kind": kind},
        "before": {"hit_rate": 0.9},
        "after": {"hit_rate": 0.1},
    }


def _failed(regressions: list[Any]) -> list[str]:
    return [c.text for c in check_regressions(regressions, WINDOWS, 60) if not c.ok]


EXPECTED = [
    regression(1, 300, "prefix_instability", "deploy", 540),
    regression(2, 840, "routing", "replicas", 1200),
]


def test_the_expected_regressions_pass() -> None:
    assert _failed(EXPECTED) == []


def test_a_wrong_cause_attribution_or_status_fails() -> None:
    wrong = [regression(1, 300, "routing", "deploy", 540), EXPECTED[1]]
    assert _failed(wrong) == [
        "v2-timestamp: prefix_instability, attributed to a deploy event, resolved by "
        "v3-fix: got cause routing"
    ]
    unattributed = [EXPECTED[0], regression(2, 840, "routing", "deploy", None)]
    (text,) = _failed(unattributed)
    assert "attributed to deploy" in text and "status open" in text


def test_a_missing_or_extra_regression_fails() -> None:
    assert len(_failed(EXPECTED[:1])) == 1
    extra = [*EXPECTED, regression(3, 1300, "eviction", "config", None)]
    (text,) = _failed(extra)
    assert text.startswith("unexpected regressions: ['eviction in cache-aware")


def test_a_change_a_bucket_before_a_phase_counts_for_it_and_a_gap_for_none() -> None:
    assert phase_of(299.5, WINDOWS, 60) == "healthy"
    assert phase_of(830, WINDOWS, 60) == "scale-4-round-robin"  # 10 s before it
    assert phase_of(800, WINDOWS, 10) is None


def test_hit_rates_agree_within_one_point() -> None:
    rows = [
        {"phase": "a", "service": "s", "engine_hit_rate": 0.90, "cachewatch_hit_rate": 0.905},
        {"phase": "b", "service": "s", "engine_hit_rate": 0.90, "cachewatch_hit_rate": 0.88},
        {"phase": "c", "service": "s", "engine_hit_rate": None, "cachewatch_hit_rate": 0.5},
    ]
    assert [c.ok for c in check_agreement(rows)] == [True, False, False]
