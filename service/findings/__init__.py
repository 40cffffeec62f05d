"""Findings (contract section 5b): the anti-patterns present in a range of traffic,
computed on read from the rollups as pure functions over Polars frames."""

from service.findings.kinds import (
    KINDS,
    MISSING_DATA,
    REWARM_KINDS,
    SEGMENT_KINDS,
    Finding,
    FindingsResult,
    worst_first,
)

__all__ = [
    "KINDS",
    "MISSING_DATA",
    "REWARM_KINDS",
    "SEGMENT_KINDS",
    "Finding",
    "FindingsResult",
    "worst_first",
]
