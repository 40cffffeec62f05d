"""What the lab's run says, checked against what its phases should produce: pure
functions over the regressions and per-phase numbers cachewatch answered, used by
`make lab` at the end of a run and by the replay test on the recorded one.

A phase window is [start, end) in epoch seconds. A regression *opens in* a phase
when its `change_ts` falls in that window, give or take one detection bucket (a
change point is placed on bucket boundaries, and a phase's first requests may
still ride the previous state).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from service.lab.phases import ASSISTANT, EXPECTED, Expected


@dataclass(frozen=True)
class Window:
    key: str
    start: float
    end: float


@dataclass(frozen=True)
class Check:
    ok: bool
    text: str


def epoch(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def phase_of(ts: float, windows: list[Window], slack_s: float) -> str | None:
    """The phase whose window holds `ts`, the nearest within `slack_s` otherwise."""
    for window in windows:
        if window.start <= ts < window.end:
            return window.key
    distance = {w.key: max(w.start - ts, ts - w.end) for w in windows}
    key, gap = min(distance.items(), key=lambda kv: kv[1], default=(None, math.inf))
    return key if gap <= slack_s else None


def check_regressions(
    regressions: list[dict[str, Any]], windows: list[Window], bucket_s: float
) -> list[Check]:
    """Each expected regression found once, with its cause, attribution and status;
    and no other regression of the assistant's service."""
    service = [r for r in regressions if r["service"] == ASSISTANT and r.get("group") is None]
    checks: list[Check] = []
    matched: set[int] = set()
    for expected in EXPECTED:
        found = [r for r in service if _opens_in(r, expected, windows, bucket_s)]
        checks.append(_check_one(expected, found, windows, bucket_s))
        matched.update(r["id"] for r in found)
    extra = [r for r in service if r["id"] not in matched]
    checks.append(
        Check(
            not extra,
            "no other regression of the assistant"
            if not extra
            else f"unexpected regressions: {[_short(r, windows, bucket_s) for r in extra]}",
        )
    )
    return checks


def _opens_in(r: dict[str, Any], expected: Expected, windows: list[Window], slack: float) -> bool:
    return phase_of(epoch(r["change_ts"]), windows, slack) == expected.opens


def _check_one(
    expected: Expected, found: list[dict[str, Any]], windows: list[Window], slack: float
) -> Check:
    label = f"{expected.opens}: {expected.cause}"
    if len(found) != 1:
        return Check(False, f"{label}: {len(found)} regressions found where one was expected")
    r = found[0]
    kind = (r.get("attributed_to") or {}).get("kind")
    resolved = r.get("resolved_at") and phase_of(epoch(r["resolved_at"]), windows, slack)
    problems = [
        f"cause {r['cause']}" if r["cause"] != expected.cause else "",
        f"attributed to {kind}" if kind != expected.kind else "",
        f"status {r['status']}" if r["status"] != "resolved" else "",
        f"resolved in {resolved}"
        if r["status"] == "resolved" and resolved != expected.resolves
        else "",
    ]
    wrong = [p for p in problems if p]
    what = f"{label}, attributed to a {expected.kind} event, resolved by {expected.resolves}"
    return Check(not wrong, what if not wrong else f"{what}: got {', '.join(wrong)}")


def _short(r: dict[str, Any], windows: list[Window], slack: float) -> str:
    phase = phase_of(epoch(r["change_ts"]), windows, slack)
    return (
        f"{r['cause']} in {phase} ({r['before']['hit_rate']:.2f} -> {r['after']['hit_rate']:.2f})"
    )


def check_agreement(phases: list[dict[str, Any]], tolerance: float = 0.01) -> list[Check]:
    """cachewatch's hit rate of each phase within `tolerance` of the engine's own."""
    checks = []
    for p in phases:
        engine, ours = p["engine_hit_rate"], p["cachewatch_hit_rate"]
        ok = engine is not None and ours is not None and abs(engine - ours) <= tolerance
        checks.append(
            Check(ok, f"{p['phase']}/{p['service']}: engine {engine} vs cachewatch {ours}")
        )
    return checks
