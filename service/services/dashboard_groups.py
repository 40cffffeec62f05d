"""What the dashboard's groups request reads (`dashboards/groups.py` words and draws
it): the groups table, the entries of `GET /v1/groups` for one field of the view's
service and model with each shown value's hit rate per sparkline bucket, and the
deploy tags that served the range side by side (a canary, contract section 5a).

Why here and not in the page: the table must equal `/v1/groups`, so its entries
come from the one function behind it (`service.services.groups`); the sparklines
and the tags' series are sums of the same chart rows per group, summed by the
database per bucket for every shown value in one statement, never a read of the
records or one read per row. A group filter of the view does not narrow these
panels: groups are kept per field, so the values of one field within another
field's value are not kept (the page says so).

Bounded: the table reads one page of the values (the busiest `limit`, ranked by the
database) and how many there are, never every value's totals; the deploy tags side
by side consider the busiest `MAX_TAG_CANDIDATES` tags of the range."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import polars as pl
from sqlalchemy.orm import Session

from service.models import ChangeEvent, Regression
from service.repository import dashboard as dashboard_repo
from service.rollups import chart
from service.rollups.groups import OTHER
from service.services.dashboard import Selection, Window, regressions_in_range
from service.services.groups import GroupsQuery, groups
from service.services.paging import Page, Paged
from service.services.series import plan

US = 1_000_000
DEPLOY = "deploy"
#: The deploy tags the canary panel considers: the busiest of the range. A build
#: number per request makes thousands; the canary is among the busiest (it carries
#: a share of the traffic), and the panel counts the rest.
MAX_TAG_CANDIDATES = 100


@dataclass(frozen=True)
class GroupsReading:
    """One field's busiest values in the range, most prompt tokens first (the first
    `/v1/groups` entries), how many values there are, and per shown value its sums
    per sparkline bucket."""

    by: str
    entries: list[dict[str, Any]]
    total: int
    spark: pl.DataFrame
    spark_bucket_s: int


def _entries(session: Session, window: Window, by: str, limit: int) -> Paged:
    query = GroupsQuery(window.service, window.model, by, window.from_us, window.to_us)
    return groups(session, query, Page(limit))


def _bucket_sums(
    session: Session, scope: chart.Scope, values: Sequence[str], window: Window, bucket_s: int
) -> pl.DataFrame:
    segments = plan(window.from_us, window.to_us, bucket_s)
    return dashboard_repo.group_bucket_sums(session, scope, values, segments, bucket_s * US)


def read_groups(
    session: Session, selection: Selection, window: Window, by: str, limit: int, bucket_s: int
) -> GroupsReading:
    """The groups table's reads: the first `limit` entries and the count of all,
    then their sparklines' sums in `bucket_s` buckets (epoch-aligned, the view's
    ends partial)."""
    if not selection.services:
        empty = pl.DataFrame(schema=dashboard_repo.GROUP_BUCKET_SCHEMA)
        return GroupsReading(by, [], 0, empty, 0)
    paged = _entries(session, window, by, limit)
    scope = chart.scope_key(window.service, window.model, chart.Group(by, ""))
    shown = [e["value"] for e in paged.entries]
    spark = _bucket_sums(session, scope, shown, window, bucket_s)
    return GroupsReading(by, paged.entries, paged.total, spark, bucket_s)


@dataclass(frozen=True)
class DeployTags:
    """The deploy tags that served the range (two or more): the `/v1/groups`
    entries of the busiest MAX_TAG_CANDIDATES and how many tags there are, each
    one's first minute ever (up to the range's end), the newest tag
    (first seen last: the canary), per bucket of the view the sums of the drawn
    tags (`value` the tag) and of the whole scope (`value` ''), and the events and
    regressions marked on their figure as on the others."""

    entries: list[dict[str, Any]]
    total: int
    first_us: dict[str, int]
    canary: str
    drawn: list[str]
    sums: pl.DataFrame
    whole: pl.DataFrame
    events: Sequence[ChangeEvent]
    regressions: list[Regression]


def newest_tag(entries: Sequence[dict[str, Any]], first_us: dict[str, int]) -> str:
    """The tag first seen last; a tie goes to the one with fewer requests (a canary
    is the small side), then to the later name."""
    return max(entries, key=lambda e: (first_us.get(e["value"], -1), -e["requests"], e["value"]))[
        "value"
    ]


def read_deploy_tags(
    session: Session, selection: Selection, window: Window, max_tags: int, max_events: int
) -> DeployTags | None:
    """The tags side by side, or None when fewer than two served the range. At most
    `max_tags` are drawn: the canary and the busiest others."""
    if not selection.services:
        return None
    paged = _entries(session, window, DEPLOY, MAX_TAG_CANDIDATES)
    # The rest of an hour's tags (`OTHER`) is no tag: never drawn nor the canary.
    entries = [e for e in paged.entries if e["requests"] and e["value"] != OTHER]
    if len(entries) < 2:
        return None
    scope = chart.scope_key(window.service, window.model, chart.Group(DEPLOY, ""))
    first = dashboard_repo.first_minutes(
        session, scope, [e["value"] for e in entries], window.to_us
    )
    canary = newest_tag(entries, first)
    drawn = [canary, *[e["value"] for e in entries if e["value"] != canary][: max_tags - 1]]
    whole = chart.scope_key(window.service, window.model)
    return DeployTags(
        entries=entries,
        total=paged.total,
        first_us=first,
        canary=canary,
        drawn=drawn,
        sums=_bucket_sums(session, scope, drawn, window, window.bucket_s),
        whole=_bucket_sums(session, whole, [""], window, window.bucket_s),
        events=dashboard_repo.events_in_range(
            session, window.service, window.model, window.from_us, window.to_us, max_events
        ),
        regressions=regressions_in_range(
            session, window.service, window.model, window.from_us, window.to_us
        ),
    )
