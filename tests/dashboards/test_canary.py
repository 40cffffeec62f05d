"""The pure parts of the groups panels on hand-made sums: the deploy tags' figure
(valid Plotly, tags escaped, each line only over its buckets), the canary's share
and comparison, which tag is the newest, and a sparkline's buckets."""

from typing import Any

import orjson
import plotly.graph_objects as go
import polars as pl
import pytest

from dashboards.canary import comparison, tags_figure, tags_payload
from dashboards.filters import View
from dashboards.groups import spark_bucket_s, sparkline
from service.repository.dashboard import GROUP_BUCKET_SCHEMA
from service.services.dashboard_groups import DeployTags, newest_tag
from tests.dashboards.helpers import XSS

US = 1_000_000
T0 = 1_767_261_600 * US  # 2026-01-01T10:00:00Z
M5 = 300 * US
VIEW = View(None, None, T0, T0 + 12 * M5, 300, None)


def sums(rows: list[tuple[str, int, int, int, int]]) -> pl.DataFrame:
    """(value, bucket index, requests, prompt, cached) rows as the repository's frame."""
    return pl.DataFrame(
        [(v, T0 + i * M5, n, p, c) for v, i, n, p, c in rows],
        schema=GROUP_BUCKET_SCHEMA,
        orient="row",
    )


def entry(value: str, requests: int) -> dict[str, Any]:
    return {"value": value, "requests": requests, "hit_rate": 0.5}


def deploy_tags(canary: str = "v2") -> DeployTags:
    """v1 serves buckets 0-11 at 9 requests and 60% hits; the canary 8-11 at 1
    request and no hit; records without a tag add 10 requests to every bucket."""
    tag_rows = [("v1", i, 9, 9000, 5400) for i in range(12)]
    tag_rows += [(canary, i, 1, 1000, 0) for i in range(8, 12)]
    return DeployTags(
        entries=[entry("v1", 108), entry(canary, 4)],
        total=2,
        first_us={"v1": T0, canary: T0 + 8 * M5},
        canary=canary,
        drawn=[canary, "v1"],
        sums=sums(tag_rows),
        whole=sums([("", i, 20, 20_000, 9000) for i in range(12)]),
        events=[],
        regressions=[],
    )


def test_the_canary_share_and_comparison_are_over_the_buckets_it_served() -> None:
    facts = comparison(deploy_tags())
    assert facts["share"] == pytest.approx(4 / 80)  # of every request, tagged or not
    assert facts["buckets_served"] == 4 and facts["shared_buckets"] == 4
    assert facts["older"] == "v1"
    assert facts["canary_hit_rate"] == 0.0 and facts["older_hit_rate"] == pytest.approx(0.6)
    payload = tags_payload(deploy_tags(), VIEW)
    assert payload["sub"].startswith(
        "v2 is the canary (the newest tag, first seen 2026-01-01 10:40:00"
    )
    assert "5.0% of the requests of the 4 buckets it served" in payload["sub"]
    assert "its hit rate is 0.0% against 60.0% for v1" in payload["sub"]
    assert [t["tag"] for t in payload["tags"]] == ["v2", "v1"] and payload["not_drawn"] == 0


def test_each_tag_is_a_line_over_its_own_buckets_escaped() -> None:
    figure = tags_figure(deploy_tags(XSS), VIEW)
    go.Figure(figure.to_plotly_json())  # full validation
    canary, older = figure.data
    assert canary.name == "&lt;script&gt;alert(1)&lt;/script&gt; (canary)" and older.name == "v1"
    assert list(canary.y) == [None] * 8 + [0.0] * 4
    assert list(older.y) == [0.6] * 12 and len(canary.x) == 12
    assert canary.connectgaps is False
    assert "<script" not in orjson.dumps(figure.to_plotly_json()).decode()


def test_the_newest_tag_is_the_one_first_seen_last() -> None:
    entries = [entry("v1", 100), entry("v2", 10), entry("v3", 5)]
    assert newest_tag(entries, {"v1": 3, "v2": 1, "v3": 2}) == "v1"
    # Seen in the same minute: the smaller is the canary.
    assert newest_tag(entries, {"v1": 1, "v2": 1, "v3": 0}) == "v2"


def test_a_sparkline_has_one_point_per_bucket_null_without_requests() -> None:
    frame = sums([("a", 0, 1, 100, 50), ("a", 3, 1, 100, 0), ("b", 1, 1, 100, 100)])
    # From the bucket holding `from` (partial) to the one before `to`.
    line = sparkline(frame, "a", T0 + 60 * US, T0 + 4 * M5, 300)
    assert line == [0.5, None, None, 0.0]
    assert sparkline(frame, "b", T0, T0 + 2 * M5, 600) == [1.0]
    assert spark_bucket_s(4 * 3600 * US) == 300 and spark_bucket_s(7 * 86_400 * US) == 6 * 3600
