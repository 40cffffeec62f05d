"""Events and regressions drawn over the time-series figures: a dotted line per
event (labelled on the hit-rate panel) and a shaded span per regression, from the
`/v1/events` and `/v1/regressions` JSON. Text is escaped here, once (`plot_text`)."""

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import plotly.graph_objects as go

from dashboards.plotting import event_color, plot_text, plot_ts, vertical_line

SPAN_FILL = "rgba(220, 53, 69, 0.13)"
MAX_LABELS = 60
LABEL_CHARS = 28
# Vertical labels that fit side by side across the hit-rate panel (~1,200 px, a
# 10 px label needs ~14): events closer than one slot share one label.
LABEL_SLOTS = 80
CHARS_PER_SLOT = 2.5  # a slot is ~15 px, a 10 px character ~6
GROUP_HOVER_LINES = 8


@dataclass(frozen=True)
class EventMarker:
    x: str
    kind: str
    label: str  # escaped; empty when a nearby earlier event's label speaks for it
    hover: str  # escaped
    label_hover: str = ""  # escaped: every event the label stands for


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


def _epoch_s(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def _share_labels(
    marks: list[EventMarker], times_s: list[float], slot_s: float
) -> list[EventMarker]:
    """Events (in time order) closer than `slot_s` to the first of their group share
    its label, "v1.2.0 +3", whose hover lists them all: several services deploying
    in the same minute otherwise print their labels over each other, unreadable
    (and each label is a text Plotly measures, ~3 ms of the page's first draw)."""
    groups: list[list[int]] = []
    for i, t in enumerate(times_s):
        if groups and t - times_s[groups[-1][0]] < slot_s:
            groups[-1].append(i)
        else:
            groups.append([i])
    shared = list(marks)
    for group in groups:
        first = marks[group[0]]
        hovers = [marks[i].hover for i in group]
        if len(hovers) > GROUP_HOVER_LINES:
            more = len(hovers) - GROUP_HOVER_LINES + 1
            hovers = [*hovers[: GROUP_HOVER_LINES - 1], f"… and {more} more"]
        label = first.label + (f" +{len(group) - 1}" if len(group) > 1 else "")
        shared[group[0]] = replace(first, label=label, label_hover="<br>".join(hovers))
        for i in group[1:]:
            shared[i] = replace(marks[i], label="")
    return shared


def markers_from(
    events: Sequence[dict[str, Any]],
    regressions: Sequence[dict[str, Any]],
    range_start: str,
    range_end: str,
) -> Markers:
    """Event lines and regression spans from `/v1/events` and `/v1/regressions`
    items. An inferred deploy event repeating a posted one (same service and tag) is
    left out: the posted one says the same, with the caller's own description.
    Events closer than 1/LABEL_SLOTS of the range share one label."""
    posted_deploys = {
        (e["service"], e.get("deploy"))
        for e in events
        if e["kind"] == "deploy" and e.get("source") == "posted"
    }
    marks, times_s = [], []
    for event in sorted(events, key=lambda e: _epoch_s(e["ts"])):
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
        times_s.append(_epoch_s(event["ts"]))
    slot_s = (_epoch_s(range_end) - _epoch_s(range_start)) / LABEL_SLOTS
    marks = _share_labels(marks, times_s, slot_s)
    ordered = sorted(regressions, key=lambda r: _epoch_s(r["change_ts"]))
    starts_s = [_epoch_s(r["change_ts"]) for r in ordered] + [_epoch_s(range_end)]
    spans = []
    for i, regression in enumerate(ordered):
        end = regression.get("resolved_at") or range_end
        lines = [
            f"regression #{regression['id']} · {regression['cause']} · {regression['status']}",
            *[str(line) for line in regression.get("evidence") or []][:4],
        ]
        room = (starts_s[i + 1] - starts_s[i]) / slot_s * CHARS_PER_SLOT if slot_s > 0 else 0
        spans.append(
            Span(
                x0=plot_ts(regression["change_ts"]),
                x1=plot_ts(end),
                label=_span_label(regression, room),
                hover="<br>".join(plot_text(line) for line in lines),
            )
        )
    return Markers(tuple(marks), tuple(spans))


def _span_label(regression: dict[str, Any], room_chars: float) -> str:
    """A span's label runs right from its start: "#7 prefix_instability" when it
    ends before the next span's label begins, else "#7", else none (the shaded span
    and the regressions table still show it); labels never print over each other."""
    full = plot_text(f"#{regression['id']} {regression['cause']}", LABEL_CHARS)
    short = f"#{regression['id']}"
    for text in (full, short):
        if len(text) + 1 <= room_chars:
            return text
    return ""


def event_points(markers: Markers) -> go.Scatter:
    """One point per event at the top of the hit-rate panel: hover tells what changed."""
    return go.Scatter(
        x=[e.x for e in markers.events],
        y=[1.04] * len(markers.events),
        name="events",
        mode="markers",
        marker={
            "symbol": "triangle-down",
            "size": 9,
            "color": [event_color(e.kind) for e in markers.events],
        },
        hovertext=[e.hover for e in markers.events],
        hoverinfo="text",
    )


def apply_markers(figure: go.Figure, markers: Markers, labels: bool) -> None:
    """Spans and event lines as layout shapes (labelled when `labels`)."""
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
        if labels and span.label:
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
    # The newest labels matter most when there are too many to read.
    unshown = sum(1 for e in markers.events if e.label) - MAX_LABELS
    for event in markers.events:
        color = event_color(event.kind)
        line = {"color": color, "width": 1, "dash": "dot"}
        shapes.append(vertical_line(event.x, line, f"event-{event.kind}"))
        if not (labels and event.label):
            continue
        unshown -= 1
        if unshown < 0:
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
                    "hovertext": event.label_hover or event.hover,
                    "showarrow": False,
                    "font": {"size": 10, "color": color},
                }
            )
    figure.update_layout(shapes=shapes, annotations=annotations)
