"""The detection job: inferred events, lasting drops per (service, model), their
attribution and cause, stored idempotently as regressions (contract section 5)."""

import time
from dataclasses import dataclass, replace

from sqlalchemy.orm import Session

from service import repository, stopping, telemetry
from service.alerts import outbox
from service.detection.changepoints import Drop
from service.detection.diagnosis import drop_cause
from service.detection.drops import find_drops
from service.detection.groups import ServiceChange, change_us
from service.detection.inferred import replica_changes
from service.detection.series import Series, build_series
from service.models import Regression
from service.repository import detection as detection_repo
from service.services import analytics_pass, group_detection
from service.services import regression_records as records
from service.services.events import EventIn, record_event, record_events
from service.services.evidence import sessions_show
from service.settings import Settings

_US = 1_000_000


@dataclass(frozen=True)
class DetectionReport:
    created: list[Regression]
    updated: list[Regression]
    inferred_events: int
    #: The worker's job (DetectionJob) says whether another step is due.
    more: bool = False

    @property
    def changed(self) -> list[Regression]:
        return [*self.created, *self.updated]

    def plus(self, other: "DetectionReport") -> "DetectionReport":
        return DetectionReport(
            [*self.created, *other.created],
            [*self.updated, *other.updated],
            self.inferred_events + other.inferred_events,
            other.more,
        )


@dataclass
class _Plan:
    """What a pass examines, fixed at its start: the (service, model)s left to do."""

    now_us: int
    since_us: int
    keys: list[tuple[str, str]]


def detect(session: Session, settings: Settings, service: str | None = None) -> DetectionReport:
    """One detection pass in the caller's transaction (`cachewatch detect`, the API).
    Re-running it finds the same changes and updates them. A pass whose process is
    stopping stops between two (service, model)s (or two groups of one) with
    PassStopped: its transaction is rolled back, and the next pass does it all again
    (service.stopping)."""
    detection_repo.take_detection_lock(session)
    analytics_pass.catch_up(session, settings)
    plan, report = _start(session, settings, service)
    for key in plan.keys:
        report = report.plus(_detect_key(session, settings, plan, key))
    telemetry.count_detection_run()
    return report


class DetectionJob:
    """The detection job as the worker runs it: a step per transaction, so that no
    pass holds SQLite's write lock (and every ingest post waiting on it) longer than
    one step, on a database of any number of services. The steps: the analytics
    catch-up (`catch_up_step`, as the analytics job), then the inferred events and
    the list of (service, model)s, then one step per (service, model). Each step
    takes the detection lock again, so a `cachewatch detect` elsewhere runs between
    two of them at worst, which is harmless: detection is idempotent per (service,
    model). Each run (the worker calls `restart` first) makes a new plan: one that
    failed or stopped half-way is not continued."""

    def __init__(self) -> None:
        self._plan: _Plan | None = None

    def restart(self) -> None:
        self._plan = None

    def __call__(self, session: Session, settings: Settings) -> DetectionReport:
        detection_repo.take_detection_lock(session)
        if self._plan is None:
            if analytics_pass.catch_up_step(session, settings).more:
                return DetectionReport([], [], 0, more=True)
            self._plan, report = _start(session, settings, None)
        else:
            report = _detect_key(session, settings, self._plan, self._plan.keys.pop(0))
        if self._plan.keys:
            return replace(report, more=True)
        self._plan = None
        telemetry.count_detection_run()
        return report


def _start(
    session: Session, settings: Settings, service: str | None
) -> tuple[_Plan, DetectionReport]:
    """The pass's window and (service, model)s, after the events it infers."""
    now_us = time.time_ns() // 1000
    since_us = _lookback_start(session, settings, now_us)
    inferred = infer_events(session, settings, since_us, service)
    keys = detection_repo.series_keys(session, since_us, service)
    return _Plan(now_us, since_us, keys), DetectionReport([], [], inferred)


def _detect_key(
    session: Session, settings: Settings, plan: _Plan, key: tuple[str, str]
) -> DetectionReport:
    """One (service, model)'s regressions, their alerts queued in the same
    transaction (the outbox, service.alerts)."""
    stopping.check(session)
    created: list[Regression] = []
    updated: list[Regression] = []
    for regression, is_new in _detect_series(session, settings, *key, plan.since_us, plan.now_us):
        (created if is_new else updated).append(regression)
    # Slack alerts (issue 5): queued in this transaction, sent by the alerts job.
    outbox.enqueue_for_detection(session, created, updated, plan.now_us)
    return DetectionReport(created, updated, 0)


def _detect_series(
    session: Session, settings: Settings, service: str, model: str, since_us: int, now_us: int
) -> list[tuple[Regression, bool]]:
    """The regressions of one (service, model): its own lasting drops, then its
    groups' and canaries' (contract sections 5, 5a, 5c)."""
    key = (service, model)
    filters = repository.RollupFilter(service, model, since_us)
    series = build_series(
        repository.fetch_rollups(session, 60, filters),
        repository.fetch_prefix_keys(session, 60, filters),
        settings.detect_bucket_s,
    )
    if len(series) == 0:
        return []
    rule = records.rule_of(settings)
    drops = find_drops(series, settings.detect_bucket_s, rule)
    groups = group_detection.GroupFindings()
    if settings.detect_groups:
        # Every lasting drop of the service, reported or not, explains its groups', and
        # so does each of its episodes while it lasts (an erosion's drops recover
        # between the day's peaks; the episode goes on).
        changes = [service_change(series, d) for d in [*drops, *records.episodes(series, drops)]]
        groups = group_detection.find_groups(session, settings, key, since_us, (series, changes))
    stopping.check(session)
    drops = [
        d
        for d in drops
        if not groups.canary_explains(series, d, rule)
        and sessions_show(session, settings, key, series, d)
    ]
    found = records.record_drops(session, settings, key, series, drops, now_us)
    return found + group_detection.record_groups(session, settings, key, groups, now_us)


def service_change(series: Series, drop: Drop) -> ServiceChange:
    recovered = None if drop.recovered_at is None else int(series.bucket_us[drop.recovered_at])
    return ServiceChange(change_us(series, drop), recovered, drop_cause(series, drop))


def _lookback_start(session: Session, settings: Settings, now_us: int) -> int:
    """Detection looks back `detect_lookback_days` from the newest data (not from the
    wall clock, so replayed or delayed traffic is examined too)."""
    newest = repository.newest_rollup_bucket(session)
    anchor = max(newest, 0) if newest is not None else now_us
    return anchor - settings.detect_lookback_days * 86_400 * _US


def infer_events(session: Session, settings: Settings, since_us: int, service: str | None) -> int:
    """Deploy events at the first record of each new tag; replicas events at lasting
    changes of the replica count. Stored once (the dedupe key holds their content)."""
    created = _infer_deploys(session, since_us, service)
    # Replicas are read from a warm-up day before the window, so the replicas that
    # served before it are known wherever it starts (a quiet night's first hour sees
    # few of them); nothing inside the warm-up is reported (docs/detection.md 1).
    warmup_start = since_us - 86_400 * _US
    for svc, model in detection_repo.series_keys(session, since_us, service):
        stopping.check(session)
        minutes = detection_repo.replica_minutes(session, svc, model, warmup_start)
        for change in replica_changes(minutes, settings.detect_bucket_s, report_from_us=since_us):
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


def _infer_deploys(session: Session, since_us: int, service: str | None) -> int:
    """The deploy events of the tags no inferred event names yet: a service's known
    tags read once (not once per tag), the events stored together (a statement per
    500), so 20,000 new tags cost 20,000 look-ups of a first record and no more."""
    known: dict[str, set[str]] = {}
    events = []
    for svc, tag, first_minute in detection_repo.deploy_first_minutes(session, since_us):
        if service is not None and svc != service:
            continue
        if svc not in known:
            known[svc] = detection_repo.known_deploy_tags(session, svc)
        if tag in known[svc]:
            continue
        stopping.check(session)
        first = detection_repo.deploy_first_record(session, svc, tag, first_minute)
        if first is not None:
            events.append(
                EventIn(
                    ts=first[0],
                    service=svc,
                    kind="deploy",
                    deploy=tag,
                    description=f"first record carrying deploy {tag}",
                )
            )
    return sum(created for _, created in record_events(session, events, source="inferred"))


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
