"""The dashboard's groups (issue 19): the group selector held in the URL (parsed and
refused with a reason), the time series of the selected group equal to
`/v1/metrics` filtered to it, the groups table equal to `/v1/groups` with each
sparkline equal to the group's hit rate per bucket, and the deploy tags side by
side when a canary serves beside the older tag (absent with one tag). Traffic is
posted to the real app (in-process) and caught up by the analytics pass."""

from typing import Any
from urllib.parse import parse_qsl, urlsplit

import orjson
import pytest
from fastapi.testclient import TestClient

from dashboards.filters import FilterError, RawFilters, resolve
from dashboards.groups import MAX_GROUP_ROWS, spark_bucket_s
from dashboards.plotting import plot_ts
from service.alerts.links import dashboard_url
from service.alerts.money import usd
from service.ingest.timestamps import parse_ts_text
from service.rfc3339 import us_to_rfc3339
from service.rollups.chart import Group
from tests.dashboards.helpers import CANARY_FROM, SPAN_S, T0, grouped, records

US = 1_000_000
VIEW = {"from": us_to_rfc3339(T0 * US), "to": us_to_rfc3339((T0 + SPAN_S) * US), "bucket": "5m"}


def post(client: TestClient, headers: dict[str, str], rows: list[dict[str, Any]]) -> None:
    body = b"\n".join(orjson.dumps(r) for r in rows)
    answer = client.post("/v1/usage", content=body, headers=headers)
    assert answer.status_code == 200 and answer.json()["rejected"] == 0, answer.text


def get(client: TestClient, headers: dict[str, str], path: str, **params: str) -> Any:
    answer = client.get(path, params=params, headers=headers)
    assert answer.status_code == 200, answer.text
    return answer.json()


@pytest.fixture
def reader(
    priced_client: TestClient, ingest_headers: dict[str, str], read_headers: dict[str, str]
) -> TestClient:
    """The dashboard app (model m priced) holding the canary traffic, read token set."""
    post(priced_client, ingest_headers, grouped(1200, canary=True))
    priced_client.headers.update(read_headers)
    return priced_client


# --- the selector ------------------------------------------------------------------


def test_a_group_is_one_field_and_value_and_the_table_follows_its_field() -> None:
    def view(**raw: str) -> tuple[Group | None, str]:
        resolved = resolve(RawFilters(**raw), None, now_us=T0 * US)
        return resolved.group, resolved.groups_by

    assert view(group_by="tenant", group_value="acme") == (Group("tenant", "acme"), "tenant")
    assert view(group_by="tenant", group_value="acme", groups="deploy")[1] == "deploy"
    assert view() == (None, "scenario")
    assert view(group_by="deploy") == (None, "deploy")  # a field, no value yet: no group
    raw = RawFilters(service="a", group_by="deploy", group_value="v 2")
    assert raw.query() == {"service": "a", "group_by": "deploy", "group_value": "v 2"}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (RawFilters(group_by="user", group_value="x"), "`group_by`: one of `scenario`, `tenant`"),
        (RawFilters(group_value="chat"), "`group_value` needs `group_by`"),
        (RawFilters(groups="user"), "`groups`: one of `scenario`, `tenant`, `deploy`"),
    ],
)
def test_bad_group_parameters_say_why(raw: RawFilters, message: str) -> None:
    with pytest.raises(FilterError, match=message):
        resolve(raw, None, now_us=T0 * US)


@pytest.mark.parametrize(
    "query",
    [
        "group_by=scenario,tenant&group_value=chat",
        "group_value=chat",
        "groups=user",
        "group_by=tenant&group_value=" + "x" * 201,
        "group_by=scenario&group_value=a%00b",
    ],
)
@pytest.mark.parametrize("path", ["/dashboard/data/series", "/dashboard/data/groups"])
def test_bad_group_parameters_are_a_clear_422_or_a_page_saying_so(
    reader: TestClient, path: str, query: str
) -> None:
    answer = reader.get(f"{path}?{query}")
    assert answer.status_code == 422, answer.text
    detail = answer.json()["detail"]
    reason = next(w for w in ("one of", "needs", "longer", "NUL") if w in detail)
    page = reader.get(f"/?{query}")
    assert page.status_code == 400 and reason in page.text


# --- the time series of a group ---------------------------------------------------


@pytest.mark.parametrize(
    "group", [("scenario", "summary"), ("tenant", "tenant-2"), ("deploy", "v2")]
)
def test_the_series_and_headline_of_a_group_equal_metrics_filtered_to_it(
    reader: TestClient, group: tuple[str, str]
) -> None:
    by, value = group
    params = {**VIEW, "service": "svc"}
    dashboard = get(reader, {}, "/dashboard/data/series", **params, group_by=by, group_value=value)
    reference = get(reader, {}, "/v1/metrics", **params, **{by: value})
    whole = get(reader, {}, "/v1/metrics", **{**VIEW, "service": "svc"})
    buckets = reference["buckets"]
    assert buckets and reference["totals"]["requests"] < whole["totals"]["requests"]
    assert dashboard["view"]["group"] == {"by": by, "value": value}
    hit_rate, ceiling = dashboard["figures"]["hit_rate"]["data"][:2]
    assert hit_rate["x"] == [plot_ts(b["ts"]) for b in buckets]
    assert hit_rate["y"] == [round(b["hit_rate"], 4) for b in buckets]
    assert ceiling["y"] == [round(b["cacheable_fraction"], 4) for b in buckets]
    spend = next(t for t in dashboard["figures"]["cost"]["data"] if t["name"] == "spend")
    assert spend["y"] == [round(b["spend_usd"], 6) for b in buckets]
    current = dashboard["headline"]["current"]
    assert current["requests"] == reference["totals"]["requests"]
    assert current["hit_rate"] == pytest.approx(reference["totals"]["hit_rate"])
    assert current["wasted_usd"] == pytest.approx(reference["totals"]["wasted_usd"])


def test_a_group_without_records_says_so(reader: TestClient) -> None:
    payload = get(
        reader, {}, "/dashboard/data/series", **VIEW, group_by="scenario", group_value="nobody"
    )
    assert payload["points"] == 0
    assert payload["notes"]["hit_rate"].startswith(
        "No usage records of scenario `nobody` for these filters in this range"
    )


# --- the groups table ----------------------------------------------------------------


@pytest.mark.parametrize("by", ["scenario", "tenant", "deploy"])
def test_the_table_is_v1_groups_with_a_sparkline_of_each_value(reader: TestClient, by: str) -> None:
    params = {**VIEW, "service": "svc", "groups": by}
    table = get(reader, {}, "/dashboard/data/groups", **params)["table"]
    api = get(
        reader, {}, "/v1/groups", service="svc", by=by, **{"from": VIEW["from"], "to": VIEW["to"]}
    )
    assert table["by"] == by and table["more"] == 0 and table["note"] is None
    assert [r["value"] for r in table["rows"]] == [g["value"] for g in api]
    for row, entry in zip(table["rows"], api, strict=True):
        for name in ("requests", "prompt_tokens", "hit_rate", "cacheable_fraction", "wasted_usd"):
            assert row[name] == entry[name], (row["value"], name)
        assert row["ttft_hit_p50"] == entry["ttft_ms"]["hit"]["p50"]
        assert row["ttft_miss_p50"] == entry["ttft_ms"]["miss"]["p50"]
        assert row["waste"] == usd(entry["wasted_usd"]) and row["waste"].startswith("$")
    # Each sparkline: the value's hit rate per sparkline bucket, as /v1/metrics
    # filtered to it answers, null where it had no requests.
    bucket = table["spark_bucket"]
    assert bucket == "5m" == f"{spark_bucket_s(SPAN_S * US) // 60}m"
    assert table["spark_from"] == VIEW["from"]
    for row in table["rows"]:
        metrics = get(reader, {}, "/v1/metrics", **{**VIEW, "bucket": bucket, by: row["value"]})
        drawn = {i: v for i, v in enumerate(row["spark"]) if v is not None}
        wanted = {
            (parse_ts_text(b["ts"]) - T0 * US) // (300 * US): round(b["hit_rate"], 4)
            for b in metrics["buckets"]
        }
        assert drawn == wanted, row["value"]
        assert len(row["spark"]) == SPAN_S // 300


def test_the_table_lists_the_whole_scope_while_a_group_is_selected(reader: TestClient) -> None:
    selected = {"group_by": "tenant", "group_value": "tenant-1"}
    payload = get(reader, {}, "/dashboard/data/groups", **VIEW, service="svc", **selected)
    assert payload["selected"] == {"by": "tenant", "value": "tenant-1"}
    table = payload["table"]
    assert table["by"] == "tenant" and len(table["rows"]) == 4
    scenarios = get(
        reader,
        {},
        "/dashboard/data/groups",
        **VIEW,
        service="svc",
        **selected,
        groups="scenario",
    )["table"]
    assert "Not narrowed to tenant `tenant-1`" in scenarios["sub"]
    assert {r["value"] for r in scenarios["rows"]} == {"chat", "summary", "search"}


def test_a_field_no_record_carries_is_explained(
    priced_client: TestClient, ingest_headers: dict[str, str], read_headers: dict[str, str]
) -> None:
    post(priced_client, ingest_headers, records(50, T0, 3600, service="svc"))
    table = get(priced_client, read_headers, "/dashboard/data/groups", **VIEW)["table"]
    assert table["rows"] == [] and table["more"] == 0
    assert table["note"].startswith("No request of this range carries a `scenario`. Send")


def test_the_table_is_capped_and_says_how_many_more(
    priced_client: TestClient, ingest_headers: dict[str, str], read_headers: dict[str, str]
) -> None:
    rows = records(400, T0, 3600, service="svc")
    for i, r in enumerate(rows):
        r["tenant"] = f"t{i % 40:02d}"
        r["prompt_tokens"] += i % 40  # distinct totals: a stable order
    post(priced_client, ingest_headers, rows)
    table = get(priced_client, read_headers, "/dashboard/data/groups", **VIEW, groups="tenant")[
        "table"
    ]
    assert len(table["rows"]) == MAX_GROUP_ROWS and table["more"] == 40 - MAX_GROUP_ROWS
    shown = f"(the {MAX_GROUP_ROWS} with the most prompt tokens are)."
    assert table["note"] == f"15 more tenant values not shown {shown}"
    tokens = [r["prompt_tokens"] for r in table["rows"]]
    assert tokens == sorted(tokens, reverse=True)


# --- the deploy tags side by side --------------------------------------------------


def test_a_canary_beside_the_older_tag_is_drawn_with_its_share(reader: TestClient) -> None:
    canary = get(reader, {}, "/dashboard/data/groups", **VIEW, service="svc")["canary"]
    assert canary is not None and canary["canary"] == "v2" and canary["older"] == "v1"
    assert canary["first_seen"] >= us_to_rfc3339(CANARY_FROM * US)
    # Its share of the requests of the buckets it served: about a tenth.
    v2 = get(reader, {}, "/v1/metrics", **VIEW, service="svc", deploy="v2")["buckets"]
    whole = {b["ts"]: b for b in get(reader, {}, "/v1/metrics", **VIEW, service="svc")["buckets"]}
    served = [b["ts"] for b in v2]
    assert canary["buckets_served"] == len(served)
    share = sum(b["requests"] for b in v2) / sum(whole[ts]["requests"] for ts in served)
    assert canary["share"] == pytest.approx(share) and 0.03 < share < 0.25
    assert canary["canary_hit_rate"] == 0.0 and canary["older_hit_rate"] > 0.2
    assert canary["sub"].startswith("v2 is the canary (the newest tag, first seen ")
    assert f"{100 * share:.1f}% of the requests of the {len(served)} buckets" in canary["sub"]
    # One line per tag on the same axes, each over the buckets it served.
    traces = {t["name"]: t for t in canary["figure"]["data"] if t["name"] != "events"}
    assert list(traces) == ["v2 (canary)", "v1"]
    for name, tag in (("v2 (canary)", "v2"), ("v1", "v1")):
        buckets = get(reader, {}, "/v1/metrics", **VIEW, service="svc", deploy=tag)["buckets"]
        points = {
            x: y for x, y in zip(traces[name]["x"], traces[name]["y"], strict=True) if y is not None
        }
        assert points == {plot_ts(b["ts"]): round(b["hit_rate"], 4) for b in buckets}, tag
    assert [t["tag"] for t in canary["tags"]] == ["v2", "v1"]


def test_with_one_tag_there_is_no_canary_panel(
    priced_client: TestClient, ingest_headers: dict[str, str], read_headers: dict[str, str]
) -> None:
    post(priced_client, ingest_headers, grouped(300, canary=False))
    payload = get(priced_client, read_headers, "/dashboard/data/groups", **VIEW)
    assert payload["canary"] is None
    values = [r["value"] for r in payload["table"]["rows"]]
    assert values[0] == "chat" and sorted(values) == ["chat", "search", "summary"]


def test_a_tag_that_followed_the_older_one_is_no_canary(
    priced_client: TestClient, ingest_headers: dict[str, str], read_headers: dict[str, str]
) -> None:
    rows = records(200, T0, SPAN_S, service="svc")
    for r in rows:
        r["deploy"] = "v1" if r["ts"] < T0 + 2 * 3600 else "v2"
    post(priced_client, ingest_headers, rows)
    canary = get(priced_client, read_headers, "/dashboard/data/groups", **VIEW)["canary"]
    assert canary["canary"] == "v2" and canary["older"] is None
    assert "no canary ran in this range" in canary["sub"]


def test_an_alerts_link_opens_the_view_of_its_group(reader: TestClient) -> None:
    """A group regression's Slack link (`service.alerts.links`) carries the group as
    the selector holds it: the page's data requests show that group."""
    regression = {
        "service": "svc",
        "model": "m",
        "change_ts": us_to_rfc3339(CANARY_FROM * US),
        "resolved_at": None,
        "group": {"by": "deploy", "value": "v2"},
    }
    link = urlsplit(dashboard_url("http://cachewatch.example", regression))
    assert link.path == "/"
    series = get(reader, {}, "/dashboard/data/series", **dict(parse_qsl(link.query)))
    assert series["view"]["group"] == {"by": "deploy", "value": "v2"}
    metrics = get(
        reader,
        {},
        "/v1/metrics",
        service="svc",
        deploy="v2",
        **{
            "from": series["view"]["from"],
            "to": series["view"]["to"],
            "bucket": series["view"]["bucket"],
        },
    )
    assert series["headline"]["current"]["requests"] == metrics["totals"]["requests"] > 0
    assert reader.get("/?" + link.query).status_code == 200
