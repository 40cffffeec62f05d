"""The providers' own diagnoses beside cachewatch's, read from the diagnosis
rollups (`service.diagnoses`): the agreement of a range for the read API, and
the evidence lines of a regression's after side and of each finding."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import polars as pl
from sqlalchemy.orm import Session

from service.diagnoses.agreement import Agreement, agreement, evidence_lines
from service.diagnoses.reasons import (
    HISTORY_REWRITE,
    PREFIX_CHANGED,
    SEGMENT_JOIN,
    segment_class,
)
from service.findings.kinds import SEGMENT_KINDS, Finding
from service.repository.diagnoses import diagnosis_counts
from service.timeunits import HOUR_US


def _hours(from_us: int | None, to_us: int | None) -> tuple[int | None, int | None]:
    """The hours the rollups hold for [from_us, to_us): the first one's start."""
    return (None if from_us is None else from_us // HOUR_US * HOUR_US), to_us


def provider_agreement(
    session: Session,
    *,
    service: str | None = None,
    model: str | None = None,
    from_us: int | None = None,
    to_us: int | None = None,
) -> Agreement:
    """The agreement over the hours that start in [from_us, to_us)."""
    start, end = _hours(from_us, to_us)
    counts = diagnosis_counts(
        session,
        services=None if service is None else [service],
        models=None if model is None else [model],
        from_us=start,
        to_us=end,
    )
    return agreement(counts)


def regression_evidence(
    session: Session, key: tuple[str, str], from_us: int, to_us: int, of_group: bool
) -> list[str]:
    """The provider's diagnoses of the (service, model) in the hours of
    [from_us, to_us) (a regression's after side) beside cachewatch's; a group's
    regression is shown its whole service's."""
    service, model = key
    found = provider_agreement(session, service=service, model=model, from_us=from_us, to_us=to_us)
    where = "after the change" + (" (the whole service)" if of_group else "")
    return evidence_lines(found, where)


def with_provider_evidence(
    session: Session, findings: Sequence[Finding], from_us: int | None, to_us: int | None
) -> list[Finding]:
    """Each finding with the provider's diagnoses of the requests cachewatch put
    under it (its kind's verdict, its segment's class), where there are any: one
    read for all of them."""
    if not findings:
        return list(findings)
    start, end = _hours(from_us, to_us)
    counts = diagnosis_counts(
        session,
        services=sorted({f.service for f in findings}),
        models=sorted({f.model for f in findings}),
        from_us=start,
        to_us=end,
    )
    if counts.is_empty():
        return list(findings)
    out = []
    for finding in findings:
        mine = counts.filter(
            (pl.col("service") == finding.service) & (pl.col("model") == finding.model)
        ).filter(_under(finding))
        lines = evidence_lines(agreement(mine), "of these requests")
        out.append(dataclasses.replace(finding, evidence=[*finding.evidence, *lines]))
    return out


def _under(finding: Finding) -> pl.Expr:
    """The diagnosis rows cachewatch put under the finding."""
    verdict = pl.col("verdict")
    if finding.kind in SEGMENT_KINDS and finding.segment is not None:
        wanted = segment_class(finding.segment)
        in_class = pl.col("segment").str.split(SEGMENT_JOIN).list.contains(wanted)
        return (verdict == PREFIX_CHANGED) & in_class
    if finding.kind == HISTORY_REWRITE:  # every rewriting request, whatever changed
        return pl.col(HISTORY_REWRITE)
    # The rewarm kinds are named as the verdicts are (`cold_fanout`: concurrent).
    return verdict == finding.kind
