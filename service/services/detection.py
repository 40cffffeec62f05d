"""The detection job: inferred events, lasting drops per (service, model), their
attribution and cause, stored idempotently as regressions (contract section 5)."""

import time
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from service import repository, telemetry
from service.alerts import outbox
from service.analytics.costs import RegressionCost, Side, regression_cost
from service.detection.changepoints import Drop, DropRule, lasting_drops, separate_episodes
from service.detection.diagnosis import SegmentVariants, diagnose
from service.detection.inferred import replica_changes
from service.detection.series import Series, Stretch, build_series, stretch
from service.models import ChangeEvent, Regression
from service.repository import detection as detection_repo
from service.rfc3339 import us_to_rfc3339
from service.services import analytics_pass
from service.services.events import EventIn, record_event
from service.settings import Settings

_US = 1_000_000
_DIAGNOSIS_SPAN_US = 6 * 3600 * _US  # segment variants are read this far on each side


@dataclass(frozen=True)
class DetectionReport:
    created: list[Regression]
    updated: list[Regression]
    inferred_events: int

    @property
    def changed(self) -> list[Regression]:
        return [*self.created, *self.updated]


def rule_of(settings: Settings) -> DropRule:
    return DropRule(
        min_abs=settings.drop_min_abs,
        min_rel=settings.drop_min_rel,
        min_buckets=settings.drop_min_buckets,
    )


def detect(session: Session, settings: Settings, service: str | None = None) -> DetectionReport:
    """One detection pass. Re-running it finds the same changes and updates them."""
    detection_repo.take_detection_lock(session)
    analytics_pass.catch_up(session, settings)
    now_us = time.time_ns() // 1000
    since_us = _lookback_start(session, settings, now_us)
    inferred = infer_events(session, settings, since_us, service)
    created: list[Regression] = []
    updated: list[Regression] = []
    for svc, model in detection_repo.series_keys(session, since_us, service):
        for regression, is_new in _detect_series(session, settings, svc, model, since_us, now_us):
            (created if is_new else updated).append(regression)
    # Slack alerts (issue 5): queued in this transaction, sent by the alerts job.
    outbox.enqueue_for_detection(session, created, updated, now_us)
    telemetry.count_detection_run()
    return DetectionReport(created, updated, inferred)


def _detect_series(
    session: Session, settings: Settings, service: str, model: str, since_us: int, now_us: int
) -> list[tuple[Regression, bool]]:
    filters = repository.RollupFilter(service, model, since_us)
    series = build_series(
        repository.fetch_rollups(session, 60, filters),
        repository.fetch_prefix_keys(session, 60, filters),
        settings.detect_bucket_s,
    )
    if len(series) == 0:
        return []

    def explained(drop: Drop) -> bool:
        change_us = int(series.bucket_us[drop.at])
        return _attribute(session, settings, service, model, change_us)[0] is not None

    drops = lasting_drops(series.hit_rate, series.weight, rule_of(settings))
    return [
        _record(session, settings, service, model, series, drop, now_us)
        for drop in separate_episodes(drops, explained)
    ]


def _lookback_start(session: Session, settings: Settings, now_us: int) -> int:
    """Detection looks back `detect_lookback_days` from the newest data (not from the
    wall clock, so replayed or delayed traffic is examined too)."""
    newest = repository.newest_rollup_bucket(session)
    anchor = max(newest, 0) if newest is not None else now_us
    return anchor - settings.detect_lookback_days * 86_400 * _US


def _record(
    session: Session,
    settings: Settings,
    service: str,
    model: str,
    series: Series,
    drop: Drop,
    now_us: int,
) -> tuple[Regression, bool]:
    bucket_us = settings.detect_bucket_s * _US
    change_us = int(series.bucket_us[drop.at])
    before = stretch(series, drop.before.start, drop.before.end)
    after = stretch(series, drop.after.start, drop.after.end)
    variants = _segment_variants(session, service, model, series, drop, change_us)
    diagnosis = diagnose(before, after, variants)
    cost = _cost(series, drop, before, after, bucket_us)
    event, lag_s = _attribute(session, settings, service, model, change_us)
    recovered_us = None if drop.recovered_at is None else int(series.bucket_us[drop.recovered_at])
    values: dict[str, Any] = {
        "before": before.contract_view(),
        "after": after.contract_view(),
        "attributed_event_id": event.id if event else None,
        "attributed_to": _attribution(event, lag_s),
        "cause": diagnosis.cause,
        "evidence": diagnosis.evidence,
        "cost": cost.as_dict() if cost is not None else None,
        "status": "resolved" if recovered_us is not None else "open",
        "resolved_at_us": recovered_us,
        "updated_at_us": now_us,
    }
    # The same change seen again (its estimate may move by a bucket or two).
    slack = 3 * bucket_us
    existing = detection_repo.find_regression(
        session, service, model, change_us - slack, change_us + slack
    )
    if existing is not None:
        for name, value in values.items():
            setattr(existing, name, value)
        session.flush()
        return existing, False
    regression = Regression(
        service=service, model=model, change_ts_us=change_us, detected_at_us=now_us, **values
    )
    detection_repo.add_regression(session, regression)
    return regression, True


def _cost(
    series: Series, drop: Drop, before: Stretch, after: Stretch, bucket_us: int
) -> RegressionCost | None:
    """Contract section 5's `cost`: a day is the after side's span in time (from its
    first bucket's start to its last one's end, gaps included)."""
    first, last = int(series.bucket_us[drop.after.start]), int(series.bucket_us[drop.after.end - 1])
    days = (last + bucket_us - first) / (86_400 * _US)

    def side(figures: Stretch, days: float) -> Side:
        return Side(figures.spend_usd, figures.prompt_tokens, figures.priced_requests, days)

    return regression_cost(side(before, days), side(after, days))


def _segment_variants(
    session: Session, service: str, model: str, series: Series, drop: Drop, change_us: int
) -> SegmentVariants:
    before_from = max(int(series.bucket_us[drop.before.start]), change_us - _DIAGNOSIS_SPAN_US)
    after_to = min(int(series.bucket_us[drop.after.end - 1]) + 1, change_us + _DIAGNOSIS_SPAN_US)
    was, was_rate = detection_repo.segment_variants_per_hour(
        session, service, model, before_from, change_us
    )
    now, now_rate = detection_repo.segment_variants_per_hour(
        session, service, model, change_us, after_to
    )
    return SegmentVariants(
        {name: (was.get(name, 0.0), now.get(name, 0.0)) for name in sorted({*was, *now})},
        (was_rate, now_rate),
    )


def _attribute(
    session: Session, settings: Settings, service: str, model: str, change_us: int
) -> tuple[ChangeEvent | None, float]:
    """The event of the service (or its model) nearest the change, within
    max(2 buckets, 15 min) either side; ties go to the earlier event."""
    reach = max(2 * settings.detect_bucket_s, 900) * _US
    events = detection_repo.events_near(
        session, service, model, change_us - reach, change_us + reach
    )
    if not events:
        return None, 0.0
    best = min(events, key=lambda e: (abs(e.ts_us - change_us), e.ts_us, e.id))
    return best, (change_us - best.ts_us) / _US


def _attribution(event: ChangeEvent | None, lag_s: float) -> dict[str, Any] | None:
    if event is None:
        return None
    return {
        "event_id": event.id,
        "kind": event.kind,
        "deploy": event.deploy,
        "replicas": event.replicas,
        "ts": us_to_rfc3339(event.ts_us),
        "source": event.source,
        "lag_s": round(lag_s, 3),
    }


def infer_events(session: Session, settings: Settings, since_us: int, service: str | None) -> int:
    """Deploy events at the first record of each new tag; replicas events at lasting
    changes of the replica count. Stored once (the dedupe key holds their content)."""
    created = 0
    for svc, tag, first_minute in detection_repo.deploy_first_minutes(session, since_us):
        if service is not None and svc != service:
            continue
        if tag in detection_repo.known_deploy_tags(session, svc):
            continue
        first = detection_repo.deploy_first_record(session, svc, tag, first_minute)
        if first is None:
            continue
        event = EventIn(
            ts=first[0],
            service=svc,
            kind="deploy",
            deploy=tag,
            description=f"first record carrying deploy {tag}",
        )
        created += record_event(session, event, source="inferred")[1]
    for svc, model in detection_repo.series_keys(session, since_us, service):
        minutes = detection_repo.replica_minutes(session, svc, model, since_us)
        for change in replica_changes(minutes, settings.detect_bucket_s):
            ts = _replica_change_ts(
                session, svc, model, change.added, change.removed, change.bucket_us
            )
            event = EventIn(
                ts=ts,
                service=svc,
                model=model,
                kind="replicas",
                replicas=change.replicas,
                description=f"replicas serving {change.previous} -> {change.replicas}"
                + (f" (new: {', '.join(change.added)})" if change.added else "")
                + (f" (gone: {', '.join(change.removed)})" if change.removed else ""),
            )
            created += record_event(session, event, source="inferred")[1]
    return created


def _replica_change_ts(
    session: Session,
    service: str,
    model: str,
    added: tuple[str, ...],
    removed: tuple[str, ...],
    bucket_us: int,
) -> int:
    """Scale up: the first request of a new replica; scale down: the last request of
    a replica that went away (within the trailing hour that revealed it)."""
    window_start = bucket_us - 3600 * _US
    if added:
        firsts = [
            detection_repo.replica_first_ts(session, service, model, r, window_start) for r in added
        ]
        found = [t for t in firsts if t is not None]
        if found:
            return min(found)
    lasts = [detection_repo.replica_last_ts(session, service, model, r, bucket_us) for r in removed]
    found = [t for t in lasts if t is not None]
    return max(found) if found else bucket_us
