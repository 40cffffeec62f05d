"""Scoring a detector against a simulated week's known changes: the detection
tests, `bench/detection.py` and the demo share it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from service.simulate.builders import ExpectedChange

#: A found change matches an expected one when within this many seconds.
MATCH_WINDOW_S = 1800.0


def _epoch_s(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


@dataclass
class Score:
    expected: int = 0
    found: int = 0
    matched: int = 0
    attributed: int = 0
    caused: int = 0
    misses: list[str] = field(default_factory=list)
    extras: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)

    @property
    def precision(self) -> float:
        return self.matched / self.found if self.found else 1.0

    @property
    def recall(self) -> float:
        return self.matched / self.expected if self.expected else 1.0

    def add(self, other: Score) -> None:
        for name in ("expected", "found", "matched", "attributed", "caused"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.misses += other.misses
        self.extras += other.extras
        self.wrong += other.wrong


def _attribution_ok(found: dict[str, Any], expected: ExpectedChange) -> bool:
    attribution = found.get("attributed_to")
    if attribution is None or attribution["kind"] != expected.kind:
        return False
    if expected.kind == "deploy":
        return bool(attribution["deploy"] == expected.deploy)
    if expected.kind == "replicas":
        return bool(attribution["replicas"] == expected.replicas)
    return True


def score(found: Sequence[dict[str, Any]], expected: Sequence[ExpectedChange]) -> Score:
    """Match found regressions (contract JSON) to expected ones by service and time."""
    result = Score(expected=len(expected), found=len(found))
    unmatched = list(found)
    for want in expected:
        at = want.at_s if want.ts is None else _epoch_s(want.ts)
        candidates = [
            f
            for f in unmatched
            if f["service"] == want.service and abs(_epoch_s(f["change_ts"]) - at) <= MATCH_WINDOW_S
        ]
        if not candidates:
            result.misses.append(f"{want.ts} {want.cause}: {want.description}")
            continue
        hit = min(candidates, key=lambda f: abs(_epoch_s(f["change_ts"]) - at))
        unmatched.remove(hit)
        result.matched += 1
        attributed = _attribution_ok(hit, want)
        caused = hit["cause"] == want.cause
        result.attributed += attributed
        result.caused += caused
        if not (attributed and caused):
            result.wrong.append(
                f"{want.ts} expected {want.cause} after {want.kind} "
                f"{want.deploy or want.replicas or ''}; got {hit['cause']} after "
                f"{hit['attributed_to']}"
            )
    result.extras = [
        f"{f['change_ts']} {f['cause']} {f['before']} -> {f['after']}" for f in unmatched
    ]
    return result
