"""Figure builders: pure functions from API answers to Plotly figures."""

import orjson
import plotly.graph_objects as go

from dashboards import figures
from dashboards.capacity_figure import Budget, capacity_figure
from dashboards.downsample import merge_buckets
from dashboards.filters import MAX_POINTS
from dashboards.markers import Markers, markers_from
from dashboards.plotting import CAUSE_COLORS, CAUSE_NAMES, format_tokens, plot_text
from service.analytics.definitions import CAUSES
from tests.dashboards.helpers import XSS, bucket, unpriced

METRICS = {
    "bucket_s": 3600,
    "buckets": [
        bucket("2026-01-01T10:00:00Z", 0.8, 0.9),
        bucket("2026-01-01T11:00:00Z", 0.2, 0.3),
        bucket("2026-01-01T12:00:00Z", 0.8, 0.9),
    ],
}
EVENTS = [
    {
        "id": 1,
        "ts": "2026-01-01T10:58:00Z",
        "service": XSS,
        "kind": "deploy",
        "model": None,
        "deploy": '"><img src=x onerror=alert(2)>',
        "replicas": None,
        "description": "<b>bold</b> %{x} release",
        "source": "posted",
    },
    {
        "id": 2,
        "ts": "2026-01-01T10:58:10Z",
        "service": XSS,
        "kind": "deploy",
        "model": None,
        "deploy": '"><img src=x onerror=alert(2)>',
        "replicas": None,
        "description": "first record carrying the tag",
        "source": "inferred",
    },
    {
        "id": 3,
        "ts": "2026-01-01T11:30:00Z",
        "service": "a",
        "kind": "replicas",
        "model": "m",
        "deploy": None,
        "replicas": 4,
        "description": "replicas serving 1 -> 4",
        "source": "inferred",
    },
]
REGRESSIONS = [
    {
        "id": 7,
        "service": XSS,
        "model": "m",
        "change_ts": "2026-01-01T11:00:00Z",
        "resolved_at": "2026-01-01T12:00:00Z",
        "status": "resolved",
        "cause": "prefix_instability",
        "evidence": ["segment `system` <had> 1 variant & then 900"],
    }
]


def _markers() -> Markers:
    return markers_from(EVENTS, REGRESSIONS, "2026-01-01T09:00:00Z", "2026-01-01T13:00:00Z")


def _all_figures() -> list[go.Figure]:
    marks = _markers()
    capacity = {
        "ceiling": 0.6,
        "points": [{"tokens": 16384 * 4**i, "hit_rate": 0.1 * i} for i in range(5)],
    }
    budget = Budget(65536, "2026-01-01T09:00:00Z", XSS)
    return [
        figures.hit_rate_figure(METRICS, marks),
        figures.rewarms_figure(METRICS, marks),
        figures.ttft_figure(METRICS, marks),
        figures.replicas_figure(METRICS, marks),
        figures.cost_figure(METRICS, marks),
        capacity_figure(capacity, budget),
    ]


def test_every_figure_has_traces_with_data_and_is_valid_plotly() -> None:
    for figure in _all_figures():
        assert figure.data and all(len(trace.x) for trace in figure.data)
        # Full validation (the builders skip it for speed on layout updates).
        go.Figure(figure.to_plotly_json())


def test_hit_rate_traces() -> None:
    figure = figures.hit_rate_figure(METRICS)
    hit, ceiling = figure.data[0], figure.data[1]
    assert list(hit.y) == [0.8, 0.2, 0.8] and list(ceiling.y) == [0.9, 0.3, 0.9]
    assert next(iter(hit.x)) == "2026-01-01 10:00:00"  # Plotly's date form, UTC


def test_markers_event_lines_labels_and_regression_spans() -> None:
    figure = figures.hit_rate_figure(METRICS, _markers())
    shapes = figure.layout.shapes
    lines = [s for s in shapes if s.type == "line"]
    spans = [s for s in shapes if s.type == "rect"]
    # The inferred deploy repeating the posted one is left out.
    assert [s.name for s in lines] == ["event-deploy", "event-replicas"]
    assert len(spans) == 1 and spans[0].x0 == "2026-01-01 11:00:00"
    assert spans[0].x1 == "2026-01-01 12:00:00"
    texts = [a.text for a in figure.layout.annotations]
    assert "4 replicas" in texts and any(t.startswith("#7 prefix") for t in texts)
    events = next(t for t in figure.data if t.name == "events")
    assert len(events.x) == 2


def test_user_strings_reach_plotly_escaped() -> None:
    dumped = orjson.dumps([f.to_plotly_json() for f in _all_figures()]).decode()
    assert "<script" not in dumped and "<img" not in dumped and "<b>bold" not in dumped
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dumped
    assert '"&gt;&lt;img src=x onerror=alert(' in dumped  # the label, shortened
    # Never inside a hovertemplate, where `%{...}` would be substituted.
    for figure in _all_figures():
        for trace in figure.data:
            assert "%{x} release" not in (trace.hovertemplate or "")


def test_capacity_budget_marker_and_ceiling() -> None:
    figure = _all_figures()[-1]
    names = [s.name for s in figure.layout.shapes]
    assert names == ["ceiling", "budget"]
    marker = next(t for t in figure.data if t.name == "at the current budget")
    assert list(marker.x) == [65536] and list(marker.y) == [0.1]
    assert figure.layout.xaxis.type == "log"


def test_traces_never_exceed_the_point_limit() -> None:
    many = {
        "buckets": [
            bucket(f"2026-01-{1 + i // 1440:02d}T{(i // 60) % 24:02d}:{i % 60:02d}:00Z", 0.5, 0.7)
            for i in range(5000)
        ]
    }
    for figure in (
        figures.hit_rate_figure(many),
        figures.rewarms_figure(many),
        figures.ttft_figure(many),
        figures.replicas_figure(many),
        figures.cost_figure(many),
    ):
        assert all(len(trace.x) <= MAX_POINTS for trace in figure.data)


def test_merge_buckets_keeps_sums_and_ratios_exact() -> None:
    buckets = [bucket("t", 0.5, 0.7, requests=10), bucket("u", 0.1, 0.2, requests=30)] * 3
    merged = merge_buckets(buckets, 3)
    assert len(merged) == 3 and merged[0]["ts"] == "t"
    assert merged[0]["requests"] == 40
    assert merged[0]["hit_rate"] == (5000 + 3000) / 40_000
    assert merged[0]["cacheable_fraction"] == (7000 + 6000) / 40_000
    assert merged[0]["rewarms"]["total"] == 10
    assert merged[0]["ttft_ms"]["miss"]["p95"] == 900.0
    assert merge_buckets(buckets, 10) == buckets


def test_plot_text_and_format_tokens() -> None:
    assert plot_text("<a>&", 100) == "&lt;a&gt;&amp;"
    assert plot_text("x" * 50, 10) == "x" * 9 + "…"
    assert format_tokens(4_194_304) == "4Mi" and format_tokens(9728) == "9.73k"
    assert format_tokens(1_500_000) == "1.5M" and format_tokens(300) == "300"


def _deploy(ts: str, service: str, tag: str) -> dict[str, object]:
    return {
        "id": 0,
        "ts": ts,
        "service": service,
        "kind": "deploy",
        "model": None,
        "deploy": tag,
        "replicas": None,
        "description": None,
        "source": "posted",
    }


def test_events_closer_than_a_label_share_one_label_that_names_them_all() -> None:
    # A day (slot 1,080 s): four services deploy within a minute, one an hour later.
    together = [_deploy(f"2026-01-01T10:00:{10 * k:02d}Z", f"svc-{k}", f"v{k}") for k in range(4)]
    later = _deploy("2026-01-01T11:00:00Z", "svc-0", "v9")
    marks = markers_from(
        [later, *reversed(together)], [], "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z"
    )
    assert [e.label for e in marks.events] == ["v0 +3", "", "", "", "v9"]
    figure = figures.hit_rate_figure(METRICS, marks)
    lines = [s for s in figure.layout.shapes if s.type == "line"]
    assert len(lines) == 5  # every event keeps its line ...
    labels = [a for a in figure.layout.annotations if a.textangle == -90]
    assert [a.text for a in labels] == ["v0 +3", "v9"]  # ... and one label a place
    assert all(f"deploy · svc-{k}" in labels[0].hovertext for k in range(4))
    assert "svc-0" in labels[1].hovertext and "svc-1" not in labels[1].hovertext
    events = next(t for t in figure.data if t.name == "events")
    assert len(events.x) == 5  # each event's own hover point stays


def test_a_shared_label_lists_at_most_a_few_events_and_counts_the_rest() -> None:
    burst = [_deploy(f"2026-01-01T10:00:{k:02d}Z", f"svc-{k}", f"v{k}") for k in range(20)]
    marks = markers_from(burst, [], "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z")
    first = marks.events[0]
    assert first.label == "v0 +19" and all(e.label == "" for e in marks.events[1:])
    lines = first.label_hover.split("<br>")
    assert len(lines) == 8 and lines[-1] == "… and 13 more"


def _regression(regression_id: int, change_ts: str) -> dict[str, object]:
    return {**REGRESSIONS[0], "id": regression_id, "change_ts": change_ts, "resolved_at": None}


def test_span_labels_shorten_then_vanish_rather_than_print_over_each_other() -> None:
    # A day in 80 slots of 1,080 s, 2.5 characters each: "#1 prefix_instability"
    # needs 9 slots (2.7 h), "#2" 2 slots (36 min).
    regressions = [
        _regression(1, "2026-01-01T01:00:00Z"),  # 5 h to the next: the full label
        _regression(2, "2026-01-01T06:00:00Z"),  # 40 min: "#2"
        _regression(3, "2026-01-01T06:40:00Z"),  # 10 min: none
        _regression(4, "2026-01-01T06:50:00Z"),  # 17 h to the range's end: the full label
    ]
    marks = markers_from([], regressions, "2026-01-01T00:00:00Z", "2026-01-02T00:00:00Z")
    assert [s.label for s in marks.spans] == [
        "#1 prefix_instability",
        "#2",
        "",
        "#4 prefix_instability",
    ]
    figure = figures.hit_rate_figure(METRICS, marks)
    assert len([s for s in figure.layout.shapes if s.type == "rect"]) == 4  # every span drawn
    assert [a.text for a in figure.layout.annotations] == [
        "#1 prefix_instability",
        "#2",
        "#4 prefix_instability",
    ]


def test_only_the_newest_labels_are_drawn_when_there_are_too_many() -> None:
    many = [
        _deploy(f"2026-01-{1 + k // 24:02d}T{k % 24:02d}:00:00Z", "s", f"v{k}") for k in range(70)
    ]
    marks = markers_from(many, [], "2026-01-01T00:00:00Z", "2026-01-03T23:00:00Z")
    assert all(e.label for e in marks.events)  # 70 hours in 80 slots: none share
    figure = figures.hit_rate_figure(METRICS, marks)
    texts = [a.text for a in figure.layout.annotations]
    assert texts == [f"v{k}" for k in range(10, 70)]  # MAX_LABELS, the newest
    assert len([s for s in figure.layout.shapes if s.type == "line"]) == 70


def test_every_cause_has_a_colour_and_a_name() -> None:
    assert set(CAUSE_COLORS) == set(CAUSE_NAMES) == set(CAUSES)


def test_cost_figure_stacks_waste_by_cause_under_the_spend() -> None:
    metrics = {**METRICS, "buckets": [*METRICS["buckets"][:2], unpriced(METRICS["buckets"][2])]}
    figure = figures.cost_figure(metrics, _markers())
    bars = [t for t in figure.data if t.type == "bar"]
    assert [t.name for t in bars] == [CAUSE_NAMES[c] for c in CAUSES]
    assert [t.marker.color for t in bars] == [CAUSE_COLORS[c] for c in CAUSES]
    eviction = bars[CAUSES.index("eviction")]
    assert list(eviction.y) == [0.00054, 0.00054, None]  # no prices: no bar, not 0
    assert list(eviction.hovertext) == ["<$0.01", "<$0.01", "no prices"]
    spend = next(t for t in figure.data if t.name == "spend")
    assert spend.yaxis is None and list(spend.y) == [0.0084, 0.0246, None]  # one axis
    assert list(spend.hovertext) == ["$0.01", "$0.02", "no prices"]
    # The hover shows the amounts worded as everywhere else (service.alerts.money).
    assert all(t.hovertemplate == "%{hovertext}" for t in figure.data)
    assert figure.layout.barmode == "stack" and figure.layout.yaxis.tickprefix == "$"
    assert any(s.type == "rect" for s in figure.layout.shapes)  # the regression span


def test_merge_buckets_adds_dollars_and_keeps_no_prices_apart() -> None:
    """Merged buckets are summed from the contract's dollars, as every other sum; a
    merged bucket of unpriced buckets stays None, one with some prices sums those."""
    priced, none = bucket("t", 0.5, 0.7), unpriced(bucket("u", 0.1, 0.2))
    merged = merge_buckets([priced, priced, none, none, priced, none], 3)
    assert [m["ts"] for m in merged] == ["t", "u", "t"]
    assert [m["spend_usd"] for m in merged] == [2 * priced["spend_usd"], None, priced["spend_usd"]]
    assert [m["wasted_usd"] for m in merged] == [
        2 * priced["wasted_usd"],
        None,
        priced["wasted_usd"],
    ]
    by_cause = [m["wasted_usd_by_cause"]["expiry"] for m in merged]
    assert by_cause == [2 * priced["wasted_usd_by_cause"]["expiry"], None, 100 * 2.7 / 1e6]
