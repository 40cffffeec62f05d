"""Figure builders: pure functions from the API's answers (the `/v1/metrics`,
`/v1/capacity`, `/v1/events` and `/v1/regressions` JSON) to Plotly figures.

User-supplied strings (deploy tags, descriptions, evidence, model names) reach
Plotly only through `plot_text`, HTML-escaped: Plotly renders a subset of HTML in
labels and hover text, and turns `&lt;` back into a literal `<`, so the text shows
as typed and no tag is ever interpreted. They never go into a hovertemplate either
(`%{...}` there would be substituted)."""

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from dashboards.downsample import merge_buckets
from dashboards.filters import MAX_POINTS

# Colours: hit rate and what bounds it in blues, causes as in docs/metrics.md.
HIT = "#1f5fbf"
CEILING = "#7aa6e8"
CAUSE_COLORS = {
    "concurrent": "#d9822b",
    "routing": "#8e44ad",
    "eviction": "#c0392b",
    "unknown": "#95a5a6",
}
CAUSE_NAMES = {
    "concurrent": "cold fan-out",
    "routing": "routing",
    "eviction": "eviction",
    "unknown": "unknown",
}
EVENT_COLORS = {"deploy": "#6f42c1", "replicas": "#0d6efd", "config": "#e67e22", "note": "#6c757d"}
SPAN_FILL = "rgba(220, 53, 69, 0.13)"
MAX_LABELS = 60
LABEL_CHARS = 28
HOVER_CHARS = 300

_TEMPLATE = go.layout.Template(
    layout=go.Layout(
        font={"family": "system-ui, -apple-system, Segoe UI, Roboto, sans-serif", "size": 12},
        paper_bgcolor="white",
        plot_bgcolor="white",
        xaxis={"gridcolor": "#eceff3", "linecolor": "#c8ced6", "zeroline": False},
        yaxis={"gridcolor": "#eceff3", "linecolor": "#c8ced6", "zeroline": False},
        colorway=[HIT, CEILING, "#2a9d8f", "#e76f51", "#6c757d"],
    )
)


def plot_text(value: object, limit: int = HOVER_CHARS) -> str:
    """A user-supplied string made safe and literal for Plotly text."""
    text = str(value)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    # Plotly turns &lt; &gt; &amp; back into characters but shows &quot; as typed;
    # quotes are harmless once no tag can open.
    return html.escape(text, quote=False)


def plot_ts(rfc3339: str) -> str:
    """`2025-03-03T08:20:00Z` -> `2025-03-03 08:20:00`: Plotly's date format (UTC)."""
    return rfc3339.replace("T", " ").removesuffix("Z").removesuffix("+00:00")


def format_tokens(tokens: float) -> str:
    n = int(tokens)
    for suffix, size in (("Gi", 1024**3), ("Mi", 1024**2), ("Ki", 1024)):
        if n >= size and n % size == 0:
            return f"{n // size}{suffix}"
    for suffix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g}{suffix}"
    return str(n)


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


# --- markers -------------------------------------------------------------------


@dataclass(frozen=True)
class EventMarker:
    x: str
    kind: str
    label: str  # escaped
    hover: str  # escaped


@dataclass(frozen=True)
class Span:
    x0: str
    x1: str
    label: str  # escaped
    hover: str  # escaped


@dataclass(frozen=True)
class Markers:
    events: tuple[EventMarker, ...] = ()
    spans: tuple[Span, ...] = ()


def _event_label(event: dict[str, Any]) -> str:
    kind = event["kind"]
    if kind == "deploy" and event.get("deploy"):
        return str(event["deploy"])
    if kind == "replicas" and event.get("replicas") is not None:
        return f"{event['replicas']} replicas"
    return str(kind)


def markers_from(
    events: Sequence[dict[str, Any]], regressions: Sequence[dict[str, Any]], range_end: str
) -> Markers:
    """Event lines and regression spans from `/v1/events` and `/v1/regressions`
    items. An inferred deploy event repeating a posted one (same service and tag) is
    left out: the posted one says the same, with the caller's own description."""
    posted_deploys = {
        (e["service"], e.get("deploy"))
        for e in events
        if e["kind"] == "deploy" and e.get("source") == "posted"
    }
    marks = []
    for event in sorted(events, key=lambda e: e["ts"]):
        repeated = (event["service"], event.get("deploy")) in posted_deploys
        if event["kind"] == "deploy" and event.get("source") == "inferred" and repeated:
            continue
        head = f"{event['kind']} · {event['service']} · {event['ts']} ({event.get('source')})"
        hover = plot_text(head)
        if event.get("description"):
            hover += "<br>" + plot_text(event["description"])
        marks.append(
            EventMarker(
                x=plot_ts(event["ts"]),
                kind=event["kind"],
                label=plot_text(_event_label(event), LABEL_CHARS),
                hover=hover,
            )
        )
    spans = []
    for regression in sorted(regressions, key=lambda r: r["change_ts"]):
        end = regression.get("resolved_at") or range_end
        lines = [
            f"regression #{regression['id']} · {regression['cause']} · {regression['status']}",
            *[str(line) for line in regression.get("evidence") or []][:4],
        ]
        spans.append(
            Span(
                x0=plot_ts(regression["change_ts"]),
                x1=plot_ts(end),
                label=plot_text(f"#{regression['id']} {regression['cause']}", LABEL_CHARS),
                hover="<br>".join(plot_text(line) for line in lines),
            )
        )
    return Markers(tuple(marks), tuple(spans))


def _apply_markers(figure: go.Figure, markers: Markers, labels: bool) -> None:
    shapes: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    for span in markers.spans:
        shapes.append(
            {
                "type": "rect",
                "xref": "x",
                "yref": "paper",
                "x0": span.x0,
                "x1": span.x1,
                "y0": 0,
                "y1": 1,
                "fillcolor": SPAN_FILL,
                "line": {"width": 0},
                "layer": "below",
                "name": "regression",
            }
        )
        if labels:
            annotations.append(
                {
                    "x": span.x0,
                    "y": 0,
                    "xref": "x",
                    "yref": "paper",
                    "xanchor": "left",
                    "yanchor": "bottom",
                    "text": span.label,
                    "hovertext": span.hover,
                    "showarrow": False,
                    "font": {"size": 10, "color": "#a71d2a"},
                    "bgcolor": "rgba(255,255,255,0.7)",
                }
            )
    for i, event in enumerate(markers.events):
        color = EVENT_COLORS.get(event.kind, "#6c757d")
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": event.x,
                "x1": event.x,
                "y0": 0,
                "y1": 1,
                "line": {"color": color, "width": 1, "dash": "dot"},
                "name": f"event-{event.kind}",
            }
        )
        # The newest labels matter most when there are too many to read.
        if labels and i >= len(markers.events) - MAX_LABELS:
            annotations.append(
                {
                    "x": event.x,
                    "y": 1,
                    "xref": "x",
                    "yref": "paper",
                    "xanchor": "right",
                    "yanchor": "top",
                    "textangle": -90,
                    "text": event.label,
                    "hovertext": event.hover,
                    "showarrow": False,
                    "font": {"size": 10, "color": color},
                }
            )
    figure.update_layout(shapes=shapes, annotations=annotations)


def _base(height: int = 300) -> go.Figure:
    # No validation of layout updates: plotly.py's validators took over a second for
    # a month of event lines on four figures. Traces are still validated when built,
    # and tests/dashboards/test_figures.py validates every figure in full.
    figure = go.Figure(_validate=False)
    figure.update_layout(
        template=_TEMPLATE,
        height=height,
        margin={"l": 60, "r": 60, "t": 36, "b": 40},
        legend={"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom", "font": {"size": 11}},
        hovermode="x unified",
        uirevision="keep",  # a refresh keeps the user's zoom
        xaxis={"type": "date"},
    )
    return figure


def _xs(buckets: Sequence[dict[str, Any]]) -> list[str]:
    return [plot_ts(b["ts"]) for b in buckets]


def _series(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    return merge_buckets(metrics.get("buckets") or [], MAX_POINTS)


# --- time series ---------------------------------------------------------------


def hit_rate_figure(metrics: dict[str, Any], markers: Markers = Markers()) -> go.Figure:
    """Hit rate against its ceiling (cacheable fraction), events and regressions."""
    buckets = _series(metrics)
    xs = _xs(buckets)
    figure = _base(340)
    figure.add_trace(
        go.Scatter(
            x=xs,
            y=[_round(b["hit_rate"]) for b in buckets],
            name="hit rate",
            mode="lines",
            line={"color": HIT, "width": 2},
            hovertemplate="%{y:.1%}",
        )
    )
    figure.add_trace(
        go.Scatter(
            x=xs,
            y=[_round(b["cacheable_fraction"]) for b in buckets],
            name="cacheable fraction (ceiling)",
            mode="lines",
            line={"color": CEILING, "width": 2, "dash": "dash"},
            hovertemplate="%{y:.1%}",
        )
    )
    if markers.events:
        # One point per event at the top: hover tells what changed.
        figure.add_trace(
            go.Scatter(
                x=[e.x for e in markers.events],
                y=[1.04] * len(markers.events),
                name="events",
                mode="markers",
                marker={
                    "symbol": "triangle-down",
                    "size": 9,
                    "color": [EVENT_COLORS.get(e.kind, "#6c757d") for e in markers.events],
                },
                hovertext=[e.hover for e in markers.events],
                hoverinfo="text",
            )
        )
    figure.update_layout(yaxis={"range": [0, 1.08], "tickformat": ".0%", "title": "tokens"})
    _apply_markers(figure, markers, labels=True)
    return figure


def rewarms_figure(metrics: dict[str, Any], markers: Markers = Markers()) -> go.Figure:
    """Rewarms per bucket stacked by cause, and rewarm tokens on the right axis."""
    buckets = _series(metrics)
    xs = _xs(buckets)
    figure = _base()
    for cause in ("concurrent", "routing", "eviction", "unknown"):
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
        go.Scatter(
            x=xs,
            y=[b.get("rewarm_tokens", 0) for b in buckets],
            name="rewarm tokens",
            mode="lines",
            line={"color": "#343a40", "width": 1.5},
            yaxis="y2",
            hovertemplate="%{y:,} tokens",
        )
    )
    figure.update_layout(
        barmode="stack",
        bargap=0.05,
        yaxis={"title": "rewarms", "rangemode": "tozero"},
        yaxis2={
            "title": "rewarm tokens",
            "overlaying": "y",
            "side": "right",
            "rangemode": "tozero",
            "showgrid": False,
        },
    )
    _apply_markers(figure, markers, labels=False)
    return figure


def ttft_figure(metrics: dict[str, Any], markers: Markers = Markers()) -> go.Figure:
    """TTFT p50 and p95 of hits and of misses."""
    buckets = _series(metrics)
    xs = _xs(buckets)
    figure = _base()
    for outcome, color in (("hit", "#2a9d8f"), ("miss", "#e76f51")):
        for quantile, dash in (("p50", "solid"), ("p95", "dot")):
            figure.add_trace(
                go.Scatter(
                    x=xs,
                    y=[
                        _round(((b.get("ttft_ms") or {}).get(outcome) or {}).get(quantile), 1)
                        for b in buckets
                    ],
                    name=f"{'hits' if outcome == 'hit' else 'misses'} {quantile}",
                    mode="lines",
                    line={"color": color, "width": 2 if quantile == "p50" else 1.5, "dash": dash},
                    connectgaps=False,
                    hovertemplate="%{y:,.0f} ms",
                )
            )
    figure.update_layout(yaxis={"title": "TTFT (ms)", "rangemode": "tozero"})
    _apply_markers(figure, markers, labels=False)
    return figure


def replicas_figure(metrics: dict[str, Any], markers: Markers = Markers()) -> go.Figure:
    """Replicas serving (left) and unique_prefix_ratio (right)."""
    buckets = _series(metrics)
    xs = _xs(buckets)
    figure = _base()
    figure.add_trace(
        go.Scatter(
            x=xs,
            y=[b.get("replicas", 0) for b in buckets],
            name="replicas serving",
            mode="lines",
            line={"color": "#0d6efd", "width": 2, "shape": "hv"},
            hovertemplate="%{y}",
        )
    )
    figure.add_trace(
        go.Scatter(
            x=xs,
            y=[_round(b.get("unique_prefix_ratio")) for b in buckets],
            name="unique prefix ratio",
            mode="lines",
            line={"color": "#d63384", "width": 1.5},
            yaxis="y2",
            hovertemplate="%{y:.1%}",
        )
    )
    figure.update_layout(
        yaxis={"title": "replicas", "rangemode": "tozero"},
        yaxis2={
            "title": "unique prefix ratio",
            "overlaying": "y",
            "side": "right",
            "range": [0, 1.05],
            "tickformat": ".0%",
            "showgrid": False,
        },
    )
    _apply_markers(figure, markers, labels=False)
    return figure


# --- capacity --------------------------------------------------------------------


@dataclass(frozen=True)
class Budget:
    """The current KV budget and the `config` event that told it."""

    tokens: int
    ts: str
    description: str


def capacity_figure(capacity: dict[str, Any], budget: Budget | None = None) -> go.Figure:
    """Hit rate against KV budget (log scale), the ceiling, the current budget."""
    points = [p for p in capacity.get("points") or [] if p.get("hit_rate") is not None]
    figure = _base(340)
    figure.update_layout(hovermode="closest")
    xs = [p["tokens"] for p in points]
    figure.add_trace(
        go.Scatter(
            x=xs,
            y=[_round(p["hit_rate"]) for p in points],
            name="LRU hit rate",
            mode="lines+markers",
            line={"color": HIT, "width": 2},
            text=[format_tokens(x) for x in xs],
            hovertemplate="%{text} tokens: %{y:.1%}<extra></extra>",
        )
    )
    shapes: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    ceiling = capacity.get("ceiling")
    if ceiling is not None:
        shapes.append(
            {
                "type": "line",
                "xref": "paper",
                "yref": "y",
                "x0": 0,
                "x1": 1,
                "y0": ceiling,
                "y1": ceiling,
                "line": {"color": CEILING, "dash": "dash", "width": 2},
                "name": "ceiling",
            }
        )
        annotations.append(
            {
                "xref": "paper",
                "yref": "y",
                "x": 0,
                "y": ceiling,
                "xanchor": "left",
                "yanchor": "bottom",
                "showarrow": False,
                "text": f"ceiling {ceiling:.1%} (unbounded cache)",
                "font": {"size": 11, "color": "#3b6fb6"},
            }
        )
    if budget is not None:
        at = next((p for p in points if p["tokens"] == budget.tokens), None)
        shapes.append(
            {
                "type": "line",
                "xref": "x",
                "yref": "paper",
                "x0": budget.tokens,
                "x1": budget.tokens,
                "y0": 0,
                "y1": 1,
                "line": {"color": EVENT_COLORS["config"], "width": 2},
                "name": "budget",
            }
        )
        label = f"current budget {format_tokens(budget.tokens)} tokens"
        if at is not None:
            label += f": {at['hit_rate']:.1%}"
        annotations.append(
            {
                "x": budget.tokens,
                "xref": "x",
                "yref": "paper",
                "y": 0.02,
                "xanchor": "left",
                "yanchor": "bottom",
                "showarrow": False,
                "text": label,
                "hovertext": f"config event {plot_ts(budget.ts)}<br>"
                + plot_text(budget.description),
                "font": {"size": 11, "color": "#b35900"},
                "bgcolor": "rgba(255,255,255,0.8)",
            }
        )
        if at is not None:
            figure.add_trace(
                go.Scatter(
                    x=[budget.tokens],
                    y=[_round(at["hit_rate"])],
                    name="at the current budget",
                    mode="markers",
                    marker={"color": EVENT_COLORS["config"], "size": 12, "symbol": "diamond"},
                    hovertemplate="current budget: %{y:.1%}<extra></extra>",
                )
            )
    tick_values = sorted({*xs, *([budget.tokens] if budget else [])})
    figure.update_layout(
        shapes=shapes,
        annotations=annotations,
        xaxis={
            "type": "log",
            "title": {"text": "KV budget (tokens, log scale)", "standoff": 4},
            "tickvals": tick_values,
            "ticktext": [format_tokens(v) for v in tick_values],
        },
        yaxis={"title": "token hit rate", "range": [0, 1.05], "tickformat": ".0%"},
    )
    return figure
