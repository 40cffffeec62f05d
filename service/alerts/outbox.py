"""What detection owes Slack. Called inside the detection transaction, so a stored
regression and its alert commit together or not at all; nothing here talks to Slack."""

from collections.abc import Sequence

from sqlalchemy.orm import Session

from service.models import Regression
from service.repository import alerts as alert_queries


def enqueue_for_detection(
    session: Session, created: Sequence[Regression], updated: Sequence[Regression], now_us: int
) -> int:
    """`opened` for each new regression; `resolved` for each that is now resolved and
    whose opening was announced (also when both happen in one pass: a regression
    found already over). A regression that existed before alerts did gets no
    resolution for an opening nobody heard. Idempotent: the (regression, kind) pair is
    unique, so re-detection queues nothing twice. Returns how many were queued."""
    queued = 0
    for regression in created:
        queued += alert_queries.add_alert(session, regression.id, "opened", now_us)
    resolved = [r.id for r in [*created, *updated] if r.status == "resolved"]
    announced = alert_queries.regressions_with_alert(session, resolved, "opened")
    for regression_id in resolved:
        if regression_id in announced:
            queued += alert_queries.add_alert(session, regression_id, "resolved", now_us)
    return queued
