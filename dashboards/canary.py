"""The deploy tags side by side (contract section 5a): when two or more `deploy`
tags of the view's service and model served in the range, each tag's hit rate per
bucket of the view, one line per tag on the same axes, only over the buckets it
served (a gap elsewhere, never a zero), with the events and regressions marked as
on the other time panels.

The newest tag (first seen last) is named the canary, with its share of the
scope's requests over the buckets it served (what the canary carries, not diluted
by the days before it existed), and its hit rate against the busiest older tag's
over the buckets both served: the comparison detection makes. A newest tag that
shared no bucket with an older one followed it: the panel says so rather than
calling it a canary."""

from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go
import polars as pl

from dashboards.filters import US, View
from dashboards.markers import Markers, apply_markers, event_points, markers_from
from dashboards.plotting import HIT, base_figure, line_trace, plot_text, plot_ts, rounded
from service.analytics.definitions import RATIOS, ratio_expr, ratios
from service.rfc3339 import us_to_rfc3339
from service.services.dashboard_groups import DeployTags
from service.services.events import event_to_json
from service.services.regressions import regression_to_json

#: The sums a hit rate divides (RATIOS' definition, its one home).
HIT_RATE_SUMS = (RATIOS["hit_rate"].numerator, RATIOS["hit_rate"].denominator)
#: Tags drawn: the canary and the busiest others.
MAX_TAGS = 6
CANARY = "#d63384"
OLDER = (HIT, "#2a9d8f", "#6c757d", "#e67e22", "#8e44ad")


def _ts(us: int) -> str:
    return us_to_rfc3339(us).replace("T", " ").replace("Z", "")


def _rate(frame: pl.DataFrame) -> float | None:
    """The hit rate of the frame's rows summed (`definitions.ratios`)."""
    sums = {n: int(frame[n].sum()) if frame.height else 0 for n in HIT_RATE_SUMS}
    return ratios(sums, ("hit_rate",))["hit_rate"]


def _served(sums: pl.DataFrame, tag: str) -> pl.DataFrame:
    """A tag's buckets with requests."""
    return sums.filter((pl.col("value") == tag) & (pl.col("requests") > 0))


def comparison(tags: DeployTags) -> dict[str, Any]:
    """The canary's share of the requests of the buckets it served, and its hit rate
    against the busiest older tag's over the buckets both served."""
    mine = _served(tags.sums, tags.canary)
    buckets = mine["bucket_us"]
    whole = tags.whole.filter(pl.col("bucket_us").is_in(buckets.implode()))
    total = int(whole["requests"].sum()) if whole.height else 0
    others = tags.sums.filter(
        (pl.col("value") != tags.canary)
        & (pl.col("requests") > 0)
        & pl.col("bucket_us").is_in(buckets.implode())
    )
    older = None
    if others.height:
        busiest = others.group_by("value").agg(pl.col("requests").sum())
        older = busiest.sort(["requests", "value"], descending=[True, False])["value"][0]
    shared = others.filter(pl.col("value") == older) if older is not None else others
    both = shared["bucket_us"]
    return {
        "share": int(mine["requests"].sum()) / total if total else None,
        "buckets_served": mine.height,
        "older": older,
        "shared_buckets": shared.height,
        "canary_hit_rate": _rate(mine.filter(pl.col("bucket_us").is_in(both.implode()))),
        "older_hit_rate": _rate(shared),
    }


def _pct(value: float | None) -> str:
    return "\u2013" if value is None else f"{value:.1%}"


def sub_text(tags: DeployTags, facts: dict[str, Any]) -> str:
    """The panel's line: who the canary is, what it carries, how it compares."""
    canary, first = tags.canary, _ts(tags.first_us[tags.canary])
    served = facts["buckets_served"]
    if facts["older"] is None:
        return (
            f"{canary} (first seen {first}) is the newest tag; it served no bucket beside an "
            "older tag: it followed it, no canary ran in this range."
        )
    share = _pct(facts["share"])
    return (
        f"{canary} is the canary (the newest tag, first seen {first} UTC): {share} of the "
        f"requests of the {served} buckets it served. Over the {facts['shared_buckets']} "
        f"buckets both served, its hit rate is {_pct(facts['canary_hit_rate'])} against "
        f"{_pct(facts['older_hit_rate'])} for {facts['older']}."
    )


def tags_figure(tags: DeployTags, view: View) -> go.Figure:
    """One hit-rate line per drawn tag over the buckets any of them served; each
    null where its tag did not serve (the line breaks there)."""
    served = tags.sums.filter(pl.col("requests") > 0)
    grid = sorted(set(served["bucket_us"].to_list()))
    xs = [plot_ts(us_to_rfc3339(b)) for b in grid]
    figure = base_figure(320)
    for index, tag in enumerate(tags.drawn):
        rates = dict(_served(tags.sums, tag).select("bucket_us", ratio_expr("hit_rate")).rows())
        ys = [rounded(rates.get(b)) for b in grid]
        is_canary = tag == tags.canary
        color = CANARY if is_canary else OLDER[(index - 1) % len(OLDER)]
        figure.add_trace(
            line_trace(
                xs,
                ys,
                plot_text(f"{tag} (canary)" if is_canary else tag, 60),
                {"color": color, "width": 2.5 if is_canary else 2},
                "%{y:.1%}",
                connectgaps=False,
            )
        )
    marks = markers(tags, view)
    if marks.events:
        figure.add_trace(event_points(marks))
    # A little below 0: a broken canary's line at 0% stays clear of the axis.
    figure.update_layout(yaxis={"range": [-0.03, 1.08], "tickformat": ".0%", "title": "hit rate"})
    apply_markers(figure, marks, labels=False)
    return figure


def markers(tags: DeployTags, view: View) -> Markers:
    return markers_from(
        [event_to_json(e) for e in tags.events],
        [regression_to_json(r) for r in tags.regressions],
        us_to_rfc3339(view.from_us),
        us_to_rfc3339(view.to_us),
    )


def tag_rows(tags: DeployTags) -> list[dict[str, Any]]:
    """Every tag of the range, the canary first, then by prompt tokens."""
    order: Sequence[dict[str, Any]] = sorted(tags.entries, key=lambda e: e["value"] != tags.canary)
    return [
        {
            "tag": e["value"],
            "canary": e["value"] == tags.canary,
            "drawn": e["value"] in tags.drawn,
            "first_seen": us_to_rfc3339(tags.first_us[e["value"]])
            if e["value"] in tags.first_us
            else None,
            "requests": e["requests"],
            "hit_rate": e["hit_rate"],
        }
        for e in order
    ]


def tags_payload(tags: DeployTags, view: View) -> dict[str, Any]:
    facts = comparison(tags)
    return {
        "canary": tags.canary,
        "first_seen": us_to_rfc3339(tags.first_us[tags.canary]),
        **facts,
        "tags": tag_rows(tags),
        "not_drawn": tags.total - len(tags.drawn),
        # Tags beyond the busiest the panel considers: counted, not listed.
        "not_listed": tags.total - len(tags.entries),
        "sub": sub_text(tags, facts),
        "figure": tags_figure(tags, view).to_plotly_json(),
        "bucket_us": view.bucket_s * US,
    }
