"""The five time-series figures, pure functions from a `/v1/metrics` answer (and
the event and regression markers) to Plotly figures. The shared pieces are in
`plotting`, the markers in `markers`, the capacity figure in `capacity_figure`.

Every builder goes through `_time_panel`: the buckets merged down to MAX_POINTS (no
trace ever carries more, whatever it is given), their x values and a base figure
for the panel's own traces, then the markers drawn over them."""

from collections.abc import Callable
from typing import Any

import plotly.graph_objects as go

from dashboards.downsample import merge_buckets
from dashboards.filters import MAX_POINTS
from dashboards.markers import Markers, apply_markers, event_points
from dashboards.plotting import (
    CAUSE_COLORS,
    CAUSE_NAMES,
    CEILING,
    HIT,
    SPEND,
    base_figure,
    line_trace,
    plot_ts,
    right_axis,
    rounded,
)
from service.alerts.money import usd
from service.analytics.definitions import CAUSES

Buckets = list[dict[str, Any]]


def _time_panel(
    metrics: dict[str, Any],
    markers: Markers,
    draw: Callable[[go.Figure, Buckets, list[str]], None],
    labels: bool = False,
    height: int = 300,
) -> go.Figure:
    """A base figure, `draw(figure, buckets, xs)` on it, then the markers."""
    buckets = merge_buckets(metrics.get("buckets") or [], MAX_POINTS)
    figure = base_figure(height)
    draw(figure, buckets, [plot_ts(b["ts"]) for b in buckets])
    apply_markers(figure, markers, labels)
    return figure


def hit_rate_figure(metrics: dict[str, Any], markers: Markers = Markers()) -> go.Figure:
    """Hit rate against its ceiling (cacheable fraction), events and regressions."""

    def draw(figure: go.Figure, buckets: Buckets, xs: list[str]) -> None:
        figure.add_trace(
            line_trace(
                xs,
                [rounded(b["hit_rate"]) for b in buckets],
                "hit rate",
                {"color": HIT, "width": 2},
                "%{y:.1%}",
            )
        )
        figure.add_trace(
            line_trace(
                xs,
                [rounded(b["cacheable_fraction"]) for b in buckets],
                "cacheable fraction (ceiling)",
                {"color": CEILING, "width": 2, "dash": "dash"},
                "%{y:.1%}",
            )
        )
        if markers.events:
            figure.add_trace(event_points(markers))
        figure.update_layout(
            yaxis={"range": [0, 1.08], "tickformat": ".0%", "title": "share of prompt tokens"}
        )

    return _time_panel(metrics, markers, draw, labels=True, height=340)


def rewarms_figure(metrics: dict[str, Any], markers: Markers = Markers()) -> go.Figure:
    """Rewarms per bucket stacked by cause, and rewarm tokens on the right axis."""

    def draw(figure: go.Figure, buckets: Buckets, xs: list[str]) -> None:
        for cause in CAUSES:
            figure.add_trace(
                go.Bar(
                    x=xs,
                    y=[(b.get("rewarms") or {}).get(cause, 0) for b in buckets],
                    name=CAUSE_NAMES[cause],
                    marker={"color": CAUSE_COLORS[cause], "line": {"width": 0}},
                    hovertemplate="%{y:,}",
                )
            )
        figure.add_trace(
            line_trace(
                xs,
                [b.get("rewarm_tokens", 0) for b in buckets],
                "rewarm tokens",
                {"color": "#343a40", "width": 1.5},
                "%{y:,} tokens",
                yaxis="y2",
            )
        )
        figure.update_layout(
            barmode="stack",
            bargap=0.05,
            yaxis={"title": "rewarms", "rangemode": "tozero"},
            yaxis2=right_axis("rewarm tokens", rangemode="tozero"),
        )

    return _time_panel(metrics, markers, draw)


def ttft_figure(metrics: dict[str, Any], markers: Markers = Markers()) -> go.Figure:
    """TTFT p50 and p95 of hits and of misses."""

    def draw(figure: go.Figure, buckets: Buckets, xs: list[str]) -> None:
        for outcome, color in (("hit", "#2a9d8f"), ("miss", "#e76f51")):
            for quantile, dash in (("p50", "solid"), ("p95", "dot")):
                figure.add_trace(
                    line_trace(
                        xs,
                        [
                            rounded(((b.get("ttft_ms") or {}).get(outcome) or {}).get(quantile), 1)
                            for b in buckets
                        ],
                        f"{'hits' if outcome == 'hit' else 'misses'} {quantile}",
                        {"color": color, "width": 2 if quantile == "p50" else 1.5, "dash": dash},
                        "%{y:,.0f} ms",
                        connectgaps=False,
                    )
                )
        figure.update_layout(yaxis={"title": "TTFT (ms)", "rangemode": "tozero"})

    return _time_panel(metrics, markers, draw)


def replicas_figure(metrics: dict[str, Any], markers: Markers = Markers()) -> go.Figure:
    """Replicas serving (left) and unique_prefix_ratio (right)."""

    def draw(figure: go.Figure, buckets: Buckets, xs: list[str]) -> None:
        figure.add_trace(
            line_trace(
                xs,
                [b.get("replicas", 0) for b in buckets],
                "replicas serving",
                {"color": "#0d6efd", "width": 2, "shape": "hv"},
                "%{y}",
            )
        )
        figure.add_trace(
            line_trace(
                xs,
                [rounded(b.get("unique_prefix_ratio")) for b in buckets],
                "unique prefix ratio",
                {"color": "#d63384", "width": 1.5},
                "%{y:.1%}",
                yaxis="y2",
            )
        )
        figure.update_layout(
            yaxis={"title": "replicas", "rangemode": "tozero"},
            yaxis2=right_axis("unique prefix ratio", range=[0, 1.05], tickformat=".0%"),
        )

    return _time_panel(metrics, markers, draw)


def _dollars(values: list[float | None]) -> tuple[list[float | None], list[str]]:
    """Plotted values (fewer digits) and their hover text, formatted where every
    dollar amount is (`service.alerts.money.usd`): None, no prices, is a gap. The
    texts go in `hovertext`, not `customdata`: plotly.py validates a customdata
    list element by element (250 ms for 2,000 strings, 10x a hovertext list)."""
    return [rounded(v, 6) for v in values], [usd(v) for v in values]


def cost_figure(metrics: dict[str, Any], markers: Markers = Markers()) -> go.Figure:
    """Wasted dollars per bucket stacked by rewarm cause (contract section 4a's
    `wasted_usd_by_cause`, in CAUSES order) under the spend, on one axis: the waste
    is part of the spend (what recomputing cacheable tokens cost above their cached
    price), so the stack never tops the line and shows its share at a glance. A
    bucket without prices has no bar and a gap in the line, not a zero."""

    def draw(figure: go.Figure, buckets: Buckets, xs: list[str]) -> None:
        for cause in CAUSES:
            ys, texts = _dollars([(b.get("wasted_usd_by_cause") or {}).get(cause) for b in buckets])
            figure.add_trace(
                go.Bar(
                    x=xs,
                    y=ys,
                    name=CAUSE_NAMES[cause],
                    marker={"color": CAUSE_COLORS[cause], "line": {"width": 0}},
                    hovertext=texts,
                    hovertemplate="%{hovertext}",
                )
            )
        ys, texts = _dollars([b.get("spend_usd") for b in buckets])
        figure.add_trace(
            line_trace(
                xs,
                ys,
                "spend",
                {"color": SPEND, "width": 1.5},
                "%{hovertext}",
                hovertext=texts,
                connectgaps=False,
            )
        )
        figure.update_layout(
            barmode="stack",
            bargap=0.05,
            yaxis={"title": "dollars per bucket", "rangemode": "tozero", "tickprefix": "$"},
        )

    return _time_panel(metrics, markers, draw)
