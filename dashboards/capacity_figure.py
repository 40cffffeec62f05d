"""The capacity figure: LRU hit rate against KV budget from a capacity replay
(`/v1/capacity`'s shape), its ceiling, and the current budget told by a `config`
event (`dashboards.budget`)."""

from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from dashboards.plotting import (
    CEILING,
    EVENT_COLORS,
    HIT,
    base_figure,
    format_tokens,
    plot_text,
    plot_ts,
    rounded,
    vertical_line,
)


@dataclass(frozen=True)
class Budget:
    """The current KV budget and the `config` event that told it."""

    tokens: int
    ts: str
    description: str


def capacity_figure(capacity: dict[str, Any], budget: Budget | None = None) -> go.Figure:
    """Hit rate against KV budget (log scale), the ceiling, the current budget."""
    points = [p for p in capacity.get("points") or [] if p.get("hit_rate") is not None]
    figure = base_figure(340)
    figure.update_layout(hovermode="closest")
    xs = [p["tokens"] for p in points]
    figure.add_trace(
        go.Scatter(
            x=xs,
            y=[rounded(p["hit_rate"]) for p in points],
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
        line = {"color": EVENT_COLORS["config"], "width": 2}
        shapes.append(vertical_line(budget.tokens, line, "budget"))
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
                    y=[rounded(at["hit_rate"])],
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
