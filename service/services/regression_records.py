"""A lasting drop or a canary -> a stored regression (contract sections 5 and 5a): its
before and after figures, attribution, cause, evidence and cost, written once and
updated when detection sees the same change again."""

import math
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from service.analytics.costs import RegressionCost, Side, regression_cost
from service.detection.canaries import Canary
from service.detection.changepoints import Drop, DropRule
from service.detection.diagnosis import SegmentVariants, diagnose, drop_cause
from service.detection.drops import reopen_us, separate_episodes
from service.detection.series import Series, Stretch, stretch
from service.models import ChangeEvent, Regression
from service.repository import detection as detection_repo
from service.rfc3339 import us_to_rfc3339
from service.rollups.chart import Group
from service.services.diagnoses import regression_evidence
from service.settings import Settings

_US = 1_000_000
_DIAGNOSIS_SPAN_US = 6 * 3600 * _US  # segment variants are read this far on each side


def rule_of(settings: Settings) -> DropRule:
    """The lasting-drop rule of the settings: its durations in buckets."""
    bucket_s = settings.detect_bucket_s
    return DropRule(
        min_abs=settings.drop_min_abs,
        min_rel=settings.drop_min_rel,
        min_buckets=max(1, math.ceil(settings.detect_min_duration_s / bucket_s)),
        recovery_buckets=max(1, math.ceil(settings.detect_recovery_s / bucket_s)),
    )


@dataclass(frozen=True)
class Assessed:
    """A drop made into a regression's values, not stored yet."""

    key: tuple[str, str]
    group: Group | None
    change_us: int
    values: dict[str, Any]
    #: The drop's span, from its before side's start to its after side's end: an
    #: open regression of the same cause that changed within it is the same
    #: episode (`store`).
    span_us: tuple[int, int]

    @property
    def cause(self) -> str:
        return str(self.values["cause"])


def record_drops(
    session: Session,
    settings: Settings,
    key: tuple[str, str],
    series: Series,
    drops: list[Drop],
    now_us: int,
    group: Group | None = None,
) -> list[tuple[Regression, bool]]:
    """The regressions of a series' drops, one per episode (`separate_episodes`: a
    drop while the series is still down from one of the same cause, or for eviction
    and expiry within a week of its recovery, is that one going on), stored
    idempotently (`store`)."""

    return [
        store(
            session,
            settings,
            assess_drop(session, settings, key, series, drop, now_us, group),
            now_us,
        )
        for drop in episodes(series, drops)
    ]


def episodes(series: Series, drops: list[Drop]) -> list[Drop]:
    """The series' drops one per episode: `separate_episodes` with drops of the same
    cause as one episode until its recovery has held `reopen_us`."""

    def same_episode(first: Drop, then: Drop, since_us: int) -> bool:
        cause = drop_cause(series, first)
        return cause == drop_cause(series, then) and since_us <= reopen_us(cause)

    return separate_episodes(drops, same_episode, series.bucket_us)


def assess_drop(
    session: Session,
    settings: Settings,
    key: tuple[str, str],
    series: Series,
    drop: Drop,
    now_us: int,
    group: Group | None = None,
) -> Assessed:
    """The regression values of a lasting drop of the (service, model) `key`'s
    series, or of one of its groups."""
    service, model = key
    bucket_us = settings.detect_bucket_s * _US
    change_us = int(series.bucket_us[drop.at])
    before = stretch(series, drop.before.start, drop.before.end)
    after = stretch(series, drop.after.start, drop.after.end)
    before_from = max(int(series.bucket_us[drop.before.start]), change_us - _DIAGNOSIS_SPAN_US)
    after_to = min(int(series.bucket_us[drop.after.end - 1]) + 1, change_us + _DIAGNOSIS_SPAN_US)
    where = None if group is None else (group.by, group.value)
    variants = _variants(
        session, key, (before_from, change_us, where), (change_us, after_to, where)
    )
    first = int(series.bucket_us[drop.after.start])
    days = (int(series.bucket_us[drop.after.end - 1]) + bucket_us - first) / (86_400 * _US)
    quiet_from = int(series.bucket_us[drop.at - 1]) if drop.at > 0 else None
    event, lag_s = attribute(session, settings, service, model, change_us, quiet_from)
    recovered_us = None if drop.recovered_at is None else int(series.bucket_us[drop.recovered_at])
    values = _values(
        before, after, variants, days, event, lag_s, recovered_us, now_us, _recovered(series, drop)
    )
    provider = regression_evidence(session, key, change_us, after_to, of_group=group is not None)
    values["evidence"] = beside_cause(values["evidence"], provider)
    span = (
        int(series.bucket_us[drop.before.start]),
        int(series.bucket_us[drop.after.end - 1]) + bucket_us,
    )
    return Assessed(key, group, change_us, values, span)


def beside_cause(evidence: list[str], provider: list[str]) -> list[str]:
    """The provider's diagnoses right after the first line (the hit rate and the
    ceiling, which the cause is read from): where a reader of the first lines (the
    dashboard's table, a clipped Slack message) sees them beside the cause."""
    return [*evidence[:1], *provider, *evidence[1:]]


def _recovered(series: Series, drop: Drop) -> Stretch | None:
    """The buckets after the recovery, as many as the drop lasted (or fewer at the
    series' end)."""
    if drop.recovered_at is None:
        return None
    length = drop.after.end - drop.after.start
    return stretch(series, drop.recovered_at, min(len(series), drop.recovered_at + length))


def record_canary(
    session: Session,
    settings: Settings,
    key: tuple[str, str],
    canary: Canary,
    change_us: int,
    now_us: int,
) -> tuple[Regression, bool]:
    """The regression of a canary: `before` the older tag and `after` the newer over
    the buckets both served, attributed to the newer tag's deploy event."""
    bucket_us = settings.detect_bucket_s * _US
    span = canary.after_series.bucket_us
    end = int(span[-1]) + bucket_us
    variants = _variants(
        session,
        key,
        (int(span[0]), end, ("deploy", canary.baseline)),
        (int(span[0]), end, ("deploy", canary.tag)),
    )
    days = (end - int(span[0])) / (86_400 * _US)
    event = detection_repo.deploy_event(session, key[0], canary.tag)
    lag_s = 0.0 if event is None else (change_us - event.ts_us) / _US
    values = _values(
        canary.before, canary.after, variants, days, event, lag_s, canary.recovered_at_us, now_us
    )
    provider = regression_evidence(session, key, int(span[0]), end, of_group=True)
    values["evidence"] = beside_cause(values["evidence"], provider)
    values["canary"] = {
        "baseline": canary.baseline,
        "share": round(canary.share, 4),
        "buckets": canary.buckets,
    }
    values["evidence"] = [
        f"deploy {canary.tag} served {canary.share:.0%} of the requests beside "
        f"{canary.baseline} over {canary.buckets} buckets, at hit rate "
        f"{canary.after.hit_rate:.0%} against {canary.before.hit_rate:.0%}",
        *values["evidence"],
    ]
    assessed = Assessed(key, Group("deploy", canary.tag), change_us, values, (int(span[0]), end))
    return store(session, settings, assessed, now_us)


def _variants(
    session: Session,
    key: tuple[str, str],
    was: tuple[int, int, tuple[str, str] | None],
    now: tuple[int, int, tuple[str, str] | None],
) -> SegmentVariants:
    """Segment variants per hour over `was` and `now`, each (from, to, the group's
    records only or None)."""
    before, before_rate = detection_repo.segment_variants_per_hour(
        session, key[0], key[1], was[0], was[1], was[2]
    )
    after, after_rate = detection_repo.segment_variants_per_hour(
        session, key[0], key[1], now[0], now[1], now[2]
    )
    return SegmentVariants(
        {name: (before.get(name, 0.0), after.get(name, 0.0)) for name in sorted({*before, *after})},
        (before_rate, after_rate),
    )


def _values(
    before: Stretch,
    after: Stretch,
    variants: SegmentVariants,
    days: float,
    event: ChangeEvent | None,
    lag_s: float,
    recovered_us: int | None,
    now_us: int,
    recovered: Stretch | None = None,
) -> dict[str, Any]:
    diagnosis = diagnose(before, after, variants, recovered)
    cost = _cost(before, after, days)
    return {
        "before": before.contract_view(),
        "after": after.contract_view(),
        "attributed_event_id": event.id if event else None,
        "attributed_to": attribution(event, lag_s),
        "cause": diagnosis.cause,
        "evidence": diagnosis.evidence,
        "cost": cost.as_dict() if cost is not None else None,
        "status": "resolved" if recovered_us is not None else "open",
        "resolved_at_us": recovered_us,
        "updated_at_us": now_us,
    }


def store(
    session: Session, settings: Settings, assessed: Assessed, now_us: int
) -> tuple[Regression, bool]:
    """Insert the regression, or update the one already stored for the same change:
    the same change seen again (its estimate may move by a bucket or two: it takes
    the new one, so a pass that saw part of the data, shuffled, is corrected), or a
    regression of the same series and cause that changed within this drop's span (a
    slow erosion found again from another step, or dated earlier with more data, or
    called over too soon by a pass that saw less: its first change, before side and
    attribution stay; its after side, evidence, cost and status follow the drop).
    Returns it and whether it is new."""
    service, model = assessed.key
    slack = 3 * settings.detect_bucket_s * _US
    change_us, values = assessed.change_us, assessed.values
    by, value = assessed.group if assessed.group is not None else ("", "")
    existing = detection_repo.find_regression(
        session, service, model, change_us - slack, change_us + slack, (by, value)
    )
    if existing is not None:
        existing.change_ts_us = change_us  # the estimate of the data now on record
    else:
        existing = detection_repo.episode_within(
            session, service, model, (by, value), assessed.cause, assessed.span_us
        )
        if existing is not None:
            values = {k: v for k, v in values.items() if k not in _FIRST_SEEN}
    if existing is not None:
        for name, new in values.items():
            setattr(existing, name, new)
        session.flush()
        return existing, False
    regression = Regression(
        service=service,
        model=model,
        group_by=by,
        group_value=value,
        change_ts_us=change_us,
        detected_at_us=now_us,
        **values,
    )
    detection_repo.add_regression(session, regression)
    return regression, True


#: What a continuing drop leaves as the regression first had it: the change it was
#: reported with (its alert, links and attribution name it) and the side before it.
_FIRST_SEEN = ("before", "attributed_event_id", "attributed_to")


def _cost(before: Stretch, after: Stretch, days: float) -> RegressionCost | None:
    """Contract section 5's `cost`: a day is the after side's span in time (from its
    first bucket's start to its last one's end, gaps included)."""

    def side(figures: Stretch) -> Side:
        return Side(figures.spend_usd, figures.prompt_tokens, figures.priced_requests, days)

    return regression_cost(side(before), side(after))


def attribute(
    session: Session,
    settings: Settings,
    service: str,
    model: str,
    change_us: int,
    quiet_from_us: int | None = None,
) -> tuple[ChangeEvent | None, float]:
    """The event of the service (or its model) nearest the change, within
    max(2 buckets, 15 min) either side; ties go to the earlier event.

    A sparse series (a tenant sending a few requests an hour, a quiet night) shows a
    change only at its first request after it: the change happened in the gap since
    its previous bucket with traffic (`quiet_from_us`), so the window reaches back
    over that gap too. A config event posted at 12:08 for a tenant whose next request
    comes at 12:32 is that change's."""
    reach = attribution_reach_us(settings)
    since = change_us - reach if quiet_from_us is None else min(change_us - reach, quiet_from_us)
    events = detection_repo.events_near(session, service, model, since, change_us + reach)
    if not events:
        return None, 0.0
    best = min(events, key=lambda e: (abs(e.ts_us - change_us), e.ts_us, e.id))
    return best, (change_us - best.ts_us) / _US


def attribution_reach_us(settings: Settings) -> int:
    """How far from a change its event may be (contract section 5)."""
    return max(2 * settings.detect_bucket_s, 900) * _US


def attribution(event: ChangeEvent | None, lag_s: float) -> dict[str, Any] | None:
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
