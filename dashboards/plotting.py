"""What every dashboard figure shares: colours, the base layout, safe text, and the
few trace, shape and axis pieces the panels are built from (`figures` for the time
series, `markers` for events and regressions on them, `capacity_figure`).

User-supplied strings (deploy tags, descriptions, evidence, model names) reach
Plotly only through `plot_text`, HTML-escaped: Plotly renders a subset of HTML in
labels and hover text, and turns `&lt;` back into a literal `<`, so the text shows
as typed and no tag is ever interpreted. They never go into a hovertemplate either
(`%{...}` there would be substituted)."""

import html
from collections.abc import Sequence
from typing import Any

import plotly.graph_objects as go

# Colours: hit rate and what bounds it in blues, causes as in docs/metrics.md.
HIT = "#1f5fbf"
CEILING = "#7aa6e8"
CAUSE_COLORS = {
    "below_minimum": "#c9a227",
    "concurrent": "#d9822b",
    "expiry": "#17a589",
    "routing": "#8e44ad",
    "eviction": "#c0392b",
    "unknown": "#95a5a6",
}
CAUSE_NAMES = {
    "below_minimum": "below the caching minimum",
    "concurrent": "cold fan-out",
    "expiry": "expired (TTL)",
    "routing": "routing",
    "eviction": "eviction",
    "unknown": "unknown",
}
SPEND = "#343a40"
EVENT_COLORS = {"deploy": "#6f42c1", "replicas": "#0d6efd", "config": "#e67e22", "note": "#6c757d"}
OTHER_EVENT = "#6c757d"
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


def rounded(value: float | None, digits: int = 4) -> float | None:
    """Fewer digits in the JSON: the figures are mostly numbers."""
    return None if value is None else round(value, digits)


def event_color(kind: str) -> str:
    return EVENT_COLORS.get(kind, OTHER_EVENT)


def base_figure(height: int = 300) -> go.Figure:
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


def line_trace(
    xs: Sequence[Any],
    ys: Sequence[Any],
    name: str,
    line: dict[str, Any],
    hovertemplate: str,
    **extra: Any,
) -> go.Scatter:
    """A line of one series (extra: e.g. `yaxis="y2"`, `connectgaps`)."""
    return go.Scatter(
        x=xs, y=ys, name=name, mode="lines", line=line, hovertemplate=hovertemplate, **extra
    )


def right_axis(title: str, **extra: Any) -> dict[str, Any]:
    """A second y axis on the right, over the first, without its own grid."""
    return {"title": title, "overlaying": "y", "side": "right", **extra, "showgrid": False}


def vertical_line(x: Any, line: dict[str, Any], name: str) -> dict[str, Any]:
    """A shape across the whole plot height at `x`."""
    return {
        "type": "line",
        "xref": "x",
        "yref": "paper",
        "x0": x,
        "x1": x,
        "y0": 0,
        "y1": 1,
        "line": line,
        "name": name,
    }
