"""Scoring a detector against a simulated scenario's known regressions: the
detection tests, `bench/detection.py`, `service.simulate.replay` and the demo
share it.

A found regression (contract JSON) matches an expected one of its service when its
`change_ts` lies in the expected one's window (by default 30 minutes either side;
a staged rollout's or a slow erosion's is longer). Among the candidates, one of
the expected group wins, then the nearest. Every other report in the window of a
regression already matched, or of its cause while it lasts (until its fix), is a
duplicate: one change reported twice is one regression and one false positive
(contract section 5c, "one change, one regression"), so it counts among the
extras.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from service.simulate.builders import ExpectedChange, Group

#: A found change matches an expected one when within this many seconds (the
#: default window of `ExpectedChange`).
MATCH_WINDOW_S = 1800.0

Found = dict[str, Any]


def _epoch_s(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


@dataclass
class Score:
    """Counts over found and expected regressions, and readable lines for the
    misses, the extras (false positives, duplicates included) and the matched ones
    with a wrong attribution, cause or group, or reported late. `matches` pairs
    each matched expectation with the report that matched it."""

    expected: int = 0
    found: int = 0
    matched: int = 0
    attributed: int = 0
    caused: int = 0
    grouped: int = 0
    duplicates: int = 0
    late: int = 0
    misses: list[str] = field(default_factory=list)
    extras: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)
    matches: list[tuple[ExpectedChange, Found]] = field(default_factory=list)

    @property
    def precision(self) -> float:
        return self.matched / self.found if self.found else 1.0

    @property
    def recall(self) -> float:
        return self.matched / self.expected if self.expected else 1.0

    def share(self, name: str) -> float:
        """attributed, caused or grouped over the matched ones (1.0 for none)."""
        value: int = getattr(self, name)
        return value / self.matched if self.matched else 1.0

    def add(self, other: Score) -> None:
        for name in (
            "expected",
            "found",
            "matched",
            "attributed",
            "caused",
            "grouped",
            "duplicates",
            "late",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.misses += other.misses
        self.extras += other.extras
        self.wrong += other.wrong
        self.matches += other.matches


def _attribution_ok(found: Found, expected: ExpectedChange) -> bool:
    attribution = found.get("attributed_to")
    if expected.kind is None:
        return attribution is None
    if attribution is None or attribution["kind"] != expected.kind:
        return False
    if expected.kind == "deploy":
        return bool(attribution["deploy"] == expected.deploy)
    if expected.kind == "replicas":
        return bool(attribution["replicas"] == expected.replicas)
    return True


def _group_of(found: Found) -> Group | None:
    group = found.get("group")
    return None if group is None else (str(group["by"]), str(group["value"]))


def _group_ok(found: Found, expected: ExpectedChange) -> bool:
    got = _group_of(found)
    return got == expected.group or (got is None and expected.service_level_ok)


def _at(expected: ExpectedChange) -> float:
    return _epoch_s(expected.ts) if expected.ts is not None else expected.at_s


def _in_window(found: Found, expected: ExpectedChange) -> bool:
    offset = _epoch_s(found["change_ts"]) - _at(expected)
    return (
        found["service"] == expected.service
        and -expected.window_before_s <= offset <= expected.window_after_s
    )


def _twin(found: Found, expected: ExpectedChange) -> bool:
    """Another report of the expected regression: in its window, or of its cause
    while it lasts (from its window's start to its fix, or for good)."""
    if _in_window(found, expected):
        return True
    offset = _epoch_s(found["change_ts"]) - _at(expected)
    until = float("inf") if expected.until_s is None else expected.until_s - expected.at_s
    return (
        found["service"] == expected.service
        and found["cause"] == expected.cause
        and -expected.window_before_s <= offset <= until
    )


def _group_text(group: Group | None) -> str:
    return "service" if group is None else f"{group[0]}={group[1]}"


def _rate(side: Any) -> str:
    value = side.get("hit_rate") if isinstance(side, dict) else None
    return "?" if value is None else f"{value:.2f}"


def found_line(found: Found) -> str:
    """A found regression in one line: service, group, change_ts, cause, hit rate
    before -> after, and what it is attributed to."""
    return (
        f"{found['service']} [{_group_text(_group_of(found))}] {found['change_ts']} "
        f"{found['cause']} hit {_rate(found.get('before'))}->{_rate(found.get('after'))} "
        f"after {_event_text(found.get('attributed_to'))}"
    )


def _event_text(attribution: dict[str, Any] | None) -> str:
    if attribution is None:
        return "no event"
    what = attribution.get("deploy") or attribution.get("replicas") or ""
    return f"{attribution['kind']} {what} ({attribution.get('source', '?')})".replace("  ", " ")


def expected_line(expected: ExpectedChange) -> str:
    """An expected regression in one line (the same fields as `found_line`)."""
    event = expected.kind or "no event"
    if expected.kind == "deploy":
        event = f"deploy {expected.deploy}"
    elif expected.kind == "replicas":
        event = f"replicas {expected.replicas}"
    return (
        f"{expected.service} [{_group_text(expected.group)}] {expected.ts} {expected.cause} "
        f"after {event}: {expected.description}"
    )


def _pick(candidates: list[Found], want: ExpectedChange) -> Found:
    """The candidate of the expected group, else of an accepted one (the whole
    service for a canary), else any; the nearest in time first."""
    at = _at(want)
    return min(
        candidates,
        key=lambda f: (
            _group_of(f) != want.group,
            not _group_ok(f, want),
            abs(_epoch_s(f["change_ts"]) - at),
        ),
    )


def _judge(
    result: Score,
    want: ExpectedChange,
    hit: Found,
    reported_at: Mapping[int, float] | None,
    start_s: float,
) -> None:
    attributed = _attribution_ok(hit, want)
    caused = hit["cause"] == want.cause
    grouped = _group_ok(hit, want)
    result.attributed += attributed
    result.caused += caused
    result.grouped += grouped
    if not (attributed and caused and grouped):
        result.wrong.append(f"expected {expected_line(want)}\n      got {found_line(hit)}")
    first = None if reported_at is None else reported_at.get(hit.get("id", -1))
    if want.report_by_s is not None and first is not None and first > start_s + want.report_by_s:
        result.late += 1
        late_h = (first - start_s - want.report_by_s) / 3600
        result.wrong.append(f"late by {late_h:.1f} h: {found_line(hit)}")


def score(
    found: Sequence[Found],
    expected: Sequence[ExpectedChange],
    reported_at: Mapping[int, float] | None = None,
    note: Callable[[Found], str] | None = None,
) -> Score:
    """Match found regressions (contract JSON) to expected ones (module docstring).
    `reported_at`: when each found one (by `id`) was first reported, in epoch
    seconds of data time, to check the expected ones' `report_by_s`. `note`: what
    an extra one was about, appended to its line."""
    result = Score(expected=len(expected), found=len(found))
    unmatched = list(found)
    matched: list[tuple[ExpectedChange, Found]] = []
    for want in sorted(expected, key=_at):
        candidates = [f for f in unmatched if _in_window(f, want)]
        if not candidates:
            result.misses.append(expected_line(want))
            continue
        hit = _pick(candidates, want)
        unmatched.remove(hit)
        matched.append((want, hit))
        result.matched += 1
        _judge(result, want, hit, reported_at, _at(want) - want.at_s)
    result.matches = matched
    for f in sorted(unmatched, key=lambda f: (f["service"], f["change_ts"])):
        twin = next((want for want, _ in matched if _twin(f, want)), None)
        if twin is not None:
            result.duplicates += 1
            result.extras.append(f"{found_line(f)} (duplicate of {twin.service} {twin.ts})")
        else:
            result.extras.append(found_line(f) + ("" if note is None else f" ({note(f)})"))
    return result
