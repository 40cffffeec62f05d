"""Detection within a (service, model): its scenarios, its busiest tenants and its
deploy tags side by side (contract sections 5, 5a and 5c; the rules are
`service.detection.groups`). Read from the groups' chart rows at the detection
bucket, one statement per (service, model)."""

from dataclasses import dataclass, field

import polars as pl
from sqlalchemy.orm import Session

from service import stopping
from service.analytics.definitions import SUM_COLUMNS
from service.detection.canaries import Canary, canaries
from service.detection.changepoints import Drop, DropRule
from service.detection.groups import (
    ServiceChange,
    explained_by_groups,
    group_drops,
    series_from_chart,
    without,
)
from service.detection.series import Series, stretch
from service.models import Regression
from service.repository import detection as detection_repo
from service.repository import groups as groups_repo
from service.rollups import chart
from service.services import regression_records as records
from service.services.evidence import sessions_show
from service.settings import Settings

_US = 1_000_000
_COUNTS = ["replica_count", "prefix_count"]


@dataclass(frozen=True)
class GroupFindings:
    """What detection found in a (service, model)'s groups, not stored yet."""

    drops: dict[chart.Group, tuple[Series, list[Drop]]] = field(default_factory=dict)
    canaries: list[Canary] = field(default_factory=list)
    tags: dict[str, Series] = field(default_factory=dict)

    def canary_explains(self, service: Series, drop: Drop, rule: DropRule) -> bool:
        """Whether a service drop is only a canary found here, seen through the whole
        service: without the canary's tag the service did not fall, and the rest still
        carries most of the drop's after side. The canary's regression says it (one
        change, one regression). Once the tag serves most of the traffic, the whole
        service's drop is a regression of its own, as a rollout to everyone is."""
        for canary in self.canaries:
            rest = without(service, self.tags[canary.tag])
            after = slice(drop.after.start, drop.after.end)
            requests = float(service.sums["requests"][after].sum())
            if float(rest.sums["requests"][after].sum()) < 0.5 * requests:
                continue
            was = stretch(rest, drop.before.start, drop.before.end).hit_rate
            now = stretch(rest, drop.after.start, drop.after.end).hit_rate
            if was - now < rule.min_abs:
                return True
        return False


def find_groups(
    session: Session,
    settings: Settings,
    key: tuple[str, str],
    since_us: int,
    service: tuple[Series, list[ServiceChange]],
) -> GroupFindings:
    """The drops of the groups of `key` (scenario, tenant) that the service's own
    drops (its series and their changes) do not explain, and its canaries."""
    chosen = watched_groups(session, settings, key, since_us)
    rows = _group_rows(session, settings, key, chosen, since_us)
    if rows.is_empty():
        return GroupFindings()
    tags, watched = {}, {}
    for (by, value), part in rows.partition_by(chart.GROUP_KEYS, as_dict=True).items():
        series = series_from_chart(part)
        if by == "deploy":
            tags[str(value)] = series
        else:
            watched[chart.Group(str(by), str(value))] = series
    rule = records.rule_of(settings)
    bucket_s = settings.detect_bucket_s
    reach = records.attribution_reach_us(settings)
    drops: dict[chart.Group, list[Drop]] = {}
    for group, series in watched.items():  # a search may take a while: stop between them
        stopping.check(session)
        drops |= group_drops(service[0], service[1], {group: series}, rule, reach, bucket_s)
    found = {group: (watched[group], group_found) for group, group_found in drops.items()}
    return GroupFindings(
        drops=explained_by_groups(found, lambda a, b: a.by != b.by),
        canaries=canaries(tags, rule, bucket_s * _US),
        tags=tags,
    )


def record_groups(
    session: Session,
    settings: Settings,
    key: tuple[str, str],
    findings: GroupFindings,
    now_us: int,
) -> list[tuple[Regression, bool]]:
    """The regressions of the groups' drops and of the canaries."""
    found: list[tuple[Regression, bool]] = []
    for group in sorted(findings.drops):
        stopping.check(session)
        series, drops = findings.drops[group]
        shown = [d for d in drops if sessions_show(session, settings, key, series, d, group)]
        found += records.record_drops(session, settings, key, series, shown, now_us, group)
    for canary in findings.canaries:
        stopping.check(session)
        first = detection_repo.deploy_first_record(
            session, key[0], canary.tag, canary.first_bucket_us
        )
        change_us = first[0] if first is not None else canary.first_bucket_us
        found.append(records.record_canary(session, settings, key, canary, change_us, now_us))
    return found


def watched_groups(
    session: Session, settings: Settings, key: tuple[str, str], since_us: int
) -> dict[str, list[str]]:
    """Per group field, the values detection watches, at most
    `detect_max_group_values` of each (the work of one (service, model) is bounded
    whatever its cardinality, so it never holds up the others' detection): the
    scenarios with the most prompt tokens since `since_us`, the
    `detect_top_tenants` busiest tenants, and, when two or more served, the deploy
    tags (`_latest`)."""
    scope = chart.Scope(0, key[0], key[1])
    cap = settings.detect_max_group_values
    chosen = {}
    for by in chart.GROUP_BYS:
        values = groups_repo.group_values(session, scope, by, 3600, since_us, None)
        if by == "deploy" and len(values) < 2:
            continue
        ranked = _latest(values) if by == "deploy" and len(values) > cap else _busiest(values)
        chosen[by] = ranked[: min(cap, settings.detect_top_tenants) if by == "tenant" else cap]
    return chosen


def _busiest(values: pl.DataFrame) -> list[str]:
    """Values by prompt tokens, most first (ties by value)."""
    return values.sort(["prompt_tokens", "value"], descending=[True, False])["value"].to_list()


def _latest(tags: pl.DataFrame) -> list[str]:
    """More deploy tags than are watched: those that served last first (by the last
    hour each served; then the busiest, ties by name). A canary and the release
    beside it serve now: ranked over the fortnight's tokens alone, a 10% canary of
    the last hour would come after every release that served a day at 100%."""
    order = tags.sort(["last_us", "prompt_tokens", "value"], descending=[True, True, False])
    return order["value"].to_list()


def _group_rows(
    session: Session,
    settings: Settings,
    key: tuple[str, str],
    chosen: dict[str, list[str]],
    since_us: int,
) -> pl.DataFrame:
    """The chosen groups' chart rows, one per detection bucket: read at that grain
    when it is a chart grain, else merged from minute rows."""
    bucket_s = settings.detect_bucket_s
    if bucket_s in chart.GRAINS_S:
        columns = ["bucket_us", *SUM_COLUMNS, *_COUNTS]
        return groups_repo.group_chart_rows(session, key, chosen, bucket_s, since_us, columns)
    minutes = groups_repo.group_chart_rows(
        session,
        key,
        chosen,
        60,
        since_us,
        [c for c in chart.CHART_SCHEMA if c not in chart.GROUP_KEYS],
    )
    grain = max(60, bucket_s // 60 * 60)
    return chart.coarsen(minutes, grain).select(
        *chart.GROUP_KEYS, "bucket_us", *SUM_COLUMNS, *_COUNTS
    )
