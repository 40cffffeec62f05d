"""The groups table (issue 19): for one group field (`scenario`, `tenant` or
`deploy`) of the view's service and model, one row per value with its requests,
hit rate, ceiling, TTFT p50 of hits and misses, waste and a sparkline of its hit
rate over the range; and the groups request's answer, which also carries the
deploy tags side by side (`dashboards.canary`).

The rows are the entries `GET /v1/groups` answers for the same scope and range
(`service.services.dashboard_groups`), dollars worded by `service.alerts.money`;
the busiest MAX_GROUP_ROWS are read and shown (the database ranks them), the rest
counted. A sparkline is the value's
hit rate per sparkline bucket, null where it had no prompt tokens: the page draws
it as a small inline SVG, breaking the line there."""

from collections.abc import Sequence
from typing import Any

import polars as pl
from sqlalchemy.orm import Session

from dashboards.canary import MAX_TAGS, tags_payload
from dashboards.data import MAX_EVENTS, Context
from dashboards.filters import DAY_S, US, auto_bucket, format_duration
from dashboards.page import scope_words
from service.alerts.money import usd
from service.analytics.definitions import ratio_expr
from service.rfc3339 import us_to_rfc3339
from service.rollups.chart import GROUP_BYS, Group
from service.services import dashboard_groups

#: Rows of the groups table (one sparkline each); the others are counted.
MAX_GROUP_ROWS = 25
#: About this many points in a sparkline.
SPARK_POINTS = 48
#: What each field is, for the note of a field no record carries.
FIELD_WORDS = {
    "scenario": "the kind of request within the service, e.g. `ticket-summary`",
    "tenant": "the caller's customer or workspace",
    "deploy": "the caller's release tag when it sent the request",
}


def spark_bucket_s(span_us: int) -> int:
    """A bucket giving about SPARK_POINTS points over the range (a whole number of
    minutes; hours beyond six hours, days beyond a couple of months)."""
    return min(auto_bucket(-(-span_us // US), SPARK_POINTS), 366 * DAY_S)


def sparkline(
    sums: pl.DataFrame, value: str, from_us: int, to_us: int, bucket_s: int
) -> list[float | None]:
    """The value's hit rate (cached / prompt tokens) per `bucket_s` bucket from the
    one holding `from_us` to the one holding the last microsecond before `to_us`,
    null in buckets where it had no prompt tokens."""
    bucket_us = bucket_s * US
    start = (from_us // bucket_us) * bucket_us
    count = max(0, -(-(to_us - start) // bucket_us))
    line: list[float | None] = [None] * count
    rows = sums.filter(pl.col("value") == value)
    for bucket, rate in rows.select("bucket_us", ratio_expr("hit_rate")).rows():
        index = (bucket - start) // bucket_us
        if 0 <= index < count and rate is not None:
            line[index] = round(rate, 4)
    return line


def _p50(entry: dict[str, Any], outcome: str) -> float | None:
    return ((entry.get("ttft_ms") or {}).get(outcome) or {}).get("p50")


def group_row(entry: dict[str, Any], spark: list[float | None]) -> dict[str, Any]:
    """One row of the table from a `/v1/groups` entry and its sparkline."""
    return {
        "value": entry["value"],
        "requests": entry["requests"],
        "prompt_tokens": entry["prompt_tokens"],
        "hit_rate": entry["hit_rate"],
        "cacheable_fraction": entry["cacheable_fraction"],
        "ttft_hit_p50": _p50(entry, "hit"),
        "ttft_miss_p50": _p50(entry, "miss"),
        "wasted_usd": entry["wasted_usd"],
        "waste": usd(entry["wasted_usd"]),
        "spark": spark,
    }


def table_words(
    by: str, shown: int, total: int, group: Group | None, bucket_s: int
) -> dict[str, str | None]:
    """The table's line under its title and its note (none shown; more not shown)."""
    sub = (
        f"Each {by} of the range, most prompt tokens first (as `GET /v1/groups` "
        f"answers); the line is its hit rate per {format_duration(bucket_s)}. "
        f"Click a {by} to see only its requests in the headline and time series."
    )
    if group is not None and group.by != by:
        sub += (
            f" Not narrowed to {group.by} `{group.value}`: groups are kept per field, "
            "so this lists every request of the scope."
        )
    note = None
    if not total:
        note = (
            f"No request of this range carries a `{by}`. Send `{by}` ({FIELD_WORDS[by]}) "
            "in each record to see each one on its own."
        )
    elif total > shown:
        note = (
            f"{total - shown} more {by} values not shown "
            f"(the {shown} with the most prompt tokens are)."
        )
    return {"sub": sub, "note": note}


def groups_table(reading: dashboard_groups.GroupsReading, ctx: Context) -> dict[str, Any]:
    """The table's rows and words from its reading."""
    view = ctx.view
    shown: Sequence[dict[str, Any]] = reading.entries[:MAX_GROUP_ROWS]
    rows = [
        group_row(
            e,
            sparkline(reading.spark, e["value"], view.from_us, view.to_us, reading.spark_bucket_s),
        )
        for e in shown
    ]
    bucket_s = reading.spark_bucket_s or spark_bucket_s(view.span_us)
    return {
        "by": reading.by,
        "bys": list(GROUP_BYS),
        "rows": rows,
        "more": reading.total - len(rows),
        "spark_bucket": format_duration(bucket_s),
        "spark_from": us_to_rfc3339((view.from_us // (bucket_s * US)) * bucket_s * US),
        **table_words(reading.by, len(rows), reading.total, view.group, bucket_s),
    }


def groups_payload(session: Session, ctx: Context) -> dict[str, Any]:
    """The groups request: the table for the view's `groups` field, the selected
    group, and the deploy tags side by side when two or more served (else null)."""
    view, window = ctx.view, ctx.window
    reading = dashboard_groups.read_groups(
        session,
        ctx.selection,
        window,
        view.groups_by,
        MAX_GROUP_ROWS,
        spark_bucket_s(view.span_us),
    )
    tags = dashboard_groups.read_deploy_tags(session, ctx.selection, window, MAX_TAGS, MAX_EVENTS)
    return {
        "scope": scope_words(view.service, view.model),
        "selected": {"by": view.group.by, "value": view.group.value} if view.group else None,
        "table": groups_table(reading, ctx),
        "canary": tags_payload(tags, view) if tags is not None else None,
    }
