"""Detection within a (service, model): its scenarios, its busiest tenants and its
deploy tags side by side (contract sections 5 and 5a; the rules are
`service.detection.groups`). Read from the groups' chart rows at the detection
bucket, one statement per (service, model)."""

import polars as pl
from sqlalchemy.orm import Session

from service.analytics.definitions import SUM_COLUMNS
from service.detection.changepoints import separate_episodes
from service.detection.groups import canaries, group_drops, series_from_chart
from service.detection.series import Series
from service.models import Regression
from service.repository import detection as detection_repo
from service.repository import groups as groups_repo
from service.rollups import chart
from service.services import regression_records as records
from service.settings import Settings

_US = 1_000_000
_COUNTS = ["replica_count", "prefix_count"]


def detect_groups(
    session: Session,
    settings: Settings,
    key: tuple[str, str],
    since_us: int,
    now_us: int,
    service: tuple[Series, list[int]],
) -> list[tuple[Regression, bool]]:
    """The regressions of the groups of `key` (scenario, tenant) that the service's own
    drops (its series and their changes) do not explain, and its canaries."""
    chosen = watched_groups(session, settings, key, since_us)
    rows = _group_rows(session, settings, key, chosen, since_us)
    if rows.is_empty():
        return []
    found: list[tuple[Regression, bool]] = []
    tags, watched = {}, {}
    for (by, value), part in rows.partition_by(chart.GROUP_KEYS, as_dict=True).items():
        series = series_from_chart(part)
        if by == "deploy":
            tags[str(value)] = series
        else:
            watched[chart.Group(str(by), str(value))] = series
    rule = records.rule_of(settings)
    bucket_us = settings.detect_bucket_s * _US
    reach = records.attribution_reach_us(settings)
    drops = group_drops(service[0], service[1], watched, rule, reach)
    for group, group_series in ((g, watched[g]) for g in sorted(drops)):
        explained = records.explained_by_event(session, settings, *key, group_series)
        for drop in separate_episodes(drops[group], explained):
            found.append(
                records.record_drop(session, settings, key, group_series, drop, now_us, group)
            )
    for canary in canaries(tags, rule, bucket_us):
        first = detection_repo.deploy_first_record(
            session, key[0], canary.tag, canary.first_bucket_us
        )
        change_us = first[0] if first is not None else canary.first_bucket_us
        found.append(records.record_canary(session, settings, key, canary, change_us, now_us))
    return found


def watched_groups(
    session: Session, settings: Settings, key: tuple[str, str], since_us: int
) -> dict[str, list[str]]:
    """Per group field, the values detection watches: every scenario, the
    `detect_top_tenants` tenants with the most prompt tokens since `since_us`, and
    the deploy tags when two or more served."""
    scope = chart.Scope(0, key[0], key[1])
    chosen = {}
    for by in chart.GROUP_BYS:
        values = groups_repo.group_values(session, scope, by, 3600, since_us, None)
        ranked = values.sort(["prompt_tokens", "value"], descending=[True, False])["value"]
        if by == "tenant":
            ranked = ranked.head(settings.detect_top_tenants)
        if by == "deploy" and len(ranked) < 2:
            continue
        chosen[by] = ranked.to_list()
    return chosen


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
