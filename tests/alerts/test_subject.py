"""Alerts about a group or a canary (contract sections 5 and 5a, issue 19): the
messages name the group, a canary's say it is one and how much traffic the new tag
carries, the dashboard link carries the group, and hostile group values and tags
render inert like hostile service names (tests/alerts/test_hostile_names.py)."""

import json
import re
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from sqlalchemy.orm import Session, sessionmaker

from service.alerts.delivery import deliver_due
from service.alerts.links import dashboard_url
from service.alerts.message import HEADER_MAX, AlertItem, compose
from service.alerts.subject import canary_sentence, share_pct, subject
from service.settings import Settings
from tests.alerts.conftest import add_regression
from tests.alerts.fake_slack import FakeSlack
from tests.alerts.test_hostile_names import (
    CODE_SPAN,
    HOSTILE,
    HOSTILE_MORE,
    MARKUP,
    invisible,
    skeleton,
    texts,
)
from tests.alerts.test_message import PUBLIC_URL, RESOLVED, assert_valid, check_golden, regression

DEPLOY_V5 = {
    "event_id": 11,
    "kind": "deploy",
    "deploy": "v5.0.0",
    "replicas": None,
    "ts": "2026-11-23T14:24:00Z",
    "source": "posted",
    "lag_s": 60,
}


def scenario(value: str = "ticket-summary", **changes: Any) -> dict[str, Any]:
    return regression(id=21, group={"by": "scenario", "value": value}, canary=None, **changes)


def tenant(value: str = "acme-corp", **changes: Any) -> dict[str, Any]:
    return regression(
        id=22, cause="history_rewrite", group={"by": "tenant", "value": value}, **changes
    )


def canary(tag: str = "v5.0.0", baseline: str = "v4.9.0", **changes: Any) -> dict[str, Any]:
    """The regression of section 5a: the newer tag on 10% of the requests, against the
    older one over the 12 buckets both served, attributed to the newer tag's deploy."""
    values: dict[str, Any] = {
        "id": 23,
        "model": "m",
        "change_ts": "2026-11-23T14:24:10Z",
        "group": {"by": "deploy", "value": tag},
        "canary": {"baseline": baseline, "share": 0.1, "buckets": 12},
        "attributed_to": {**DEPLOY_V5, "deploy": tag},
    }
    return regression(**{**values, **changes})


def opened(one: dict[str, Any]) -> dict[str, Any]:
    return compose([AlertItem("opened", one)], PUBLIC_URL).payload()


def resolved(one: dict[str, Any]) -> dict[str, Any]:
    return compose([AlertItem("resolved", {**one, **RESOLVED})], PUBLIC_URL).payload()


def header(payload: dict[str, Any]) -> str:
    return str(payload["blocks"][0]["text"]["text"])


def query_of(payload: dict[str, Any], label: str = "Open the dashboard") -> dict[str, list[str]]:
    """The query of the message's dashboard link, decoded."""
    text = next(t["text"] for t in texts(payload) if f"|{label}>" in t["text"])
    url = re.search(rf"<([^|<>]*)\|{label}>", text)
    assert url is not None, text
    return parse_qs(urlsplit(url[1].replace("&amp;", "&")).query)


def test_a_scenario_regression_names_its_scenario() -> None:
    payload = opened(scenario())
    assert_valid(payload)
    check_golden("scenario_opened", payload)
    assert header(payload) == "scenario `ticket-summary` of assistant/acme-70b-instruct: " + (
        "hit rate 71% → 12%"
    )
    name = "scenario `ticket-summary` of `assistant/acme-70b-instruct`"
    assert payload["text"].startswith(f"Cache regression: {name} hit rate 71% → 12%")
    assert f"|Open the dashboard> on {name}, 3 hours either side" in json.dumps(payload)
    assert "Canary" not in json.dumps(payload)
    assert query_of(payload)["group_by"] == ["scenario"]
    assert query_of(payload)["group_value"] == ["ticket-summary"]


def test_a_tenant_regression_names_its_tenant() -> None:
    payload = opened(tenant())
    assert_valid(payload)
    check_golden("tenant_opened", payload)
    assert header(payload).startswith("tenant `acme-corp` of assistant/acme-70b-instruct: hit")
    assert "Conversations stopped extending their history" in json.dumps(payload)
    assert {k: v for k, v in query_of(payload).items() if k.startswith("group")} == {
        "group_by": ["tenant"],
        "group_value": ["acme-corp"],
    }


def test_a_canary_alert_says_it_is_one_and_how_much_traffic_it_carries() -> None:
    payload = opened(canary())
    assert_valid(payload)
    check_golden("canary_opened", payload)
    assert header(payload) == (
        "Canary deploy `v5.0.0` of assistant/m (10% of requests, beside v4.9.0): hit rate 71% → 12%"
    )
    change = payload["blocks"][1]["text"]["text"]
    assert (
        "\n*Canary:* Deploy `v5.0.0` served 10% of the requests beside `v4.9.0` over the 12 "
        "detection buckets compared: the release has not reached all traffic yet. "
        "Roll it back before the full rollout.\n"
    ) in change
    assert "*Change:* deploy `v5.0.0` at 2026-11-23 14:24 UTC (posted), lag 1 min" in change
    assert payload["text"].startswith(
        "Cache regression: canary deploy `v5.0.0` of `assistant/m` "
        "(10% of requests, beside `v4.9.0`) hit rate 71% → 12%"
    )
    query = query_of(payload)
    assert (query["group_by"], query["group_value"]) == (["deploy"], ["v5.0.0"])


def test_a_resolved_canary_is_short_and_still_names_its_tag() -> None:
    payload = resolved(canary())
    assert_valid(payload)
    check_golden("canary_resolved", payload)
    assert header(payload) == "Resolved: canary deploy `v5.0.0` of assistant/m hit rate recovered"
    assert payload["text"].startswith("Resolved: canary deploy `v5.0.0` of `assistant/m`. ")
    assert len(payload["blocks"]) == 3 and "Roll it back" not in json.dumps(payload)
    assert query_of(payload)["group_value"] == ["v5.0.0"]
    # Found already over: the opening says so and does not ask for a rollback.
    over = opened({**canary(), **RESOLVED})
    assert "the drop was caught on the canary, before a full rollout" in json.dumps(over)
    assert "Roll it back" not in json.dumps(over)


def test_a_digest_mixing_a_group_a_canary_and_a_service() -> None:
    items = [
        AlertItem("opened", scenario()),
        AlertItem("opened", regression(id=24, service="search-agent", cost=None)),
        AlertItem("opened", canary()),
        AlertItem("resolved", tenant(**RESOLVED)),
    ]
    payload = compose(items, PUBLIC_URL).payload()
    assert_valid(payload)
    check_golden("group_digest", payload)
    assert header(payload) == "cachewatch: 3 cache regressions, 1 resolved"
    entries = [b["text"]["text"] for b in payload["blocks"][1:5]]
    assert entries[0].startswith(
        "*Regression* scenario `ticket-summary` of `assistant/acme-70b-instruct`: hit rate"
    )
    assert entries[1].startswith("*Regression* `search-agent/acme-70b-instruct`: hit rate")
    assert entries[2].startswith("*Regression* canary deploy `v5.0.0` of `assistant/m`: hit")
    assert "\n*Canary:* Deploy `v5.0.0` served 10% of the requests" in entries[2]
    assert entries[3].startswith("*Resolved* tenant `acme-corp` of `assistant/acme-70b-instruct`")
    assert all("*Canary:*" not in e for e in (entries[0], entries[1], entries[3]))
    # Each entry's link opens its own group; the service's carries none.
    links = [query_of({"text": e, "blocks": []}, "Dashboard") for e in entries]
    assert [q.get("group_value") for q in links] == [
        ["ticket-summary"],
        None,
        ["v5.0.0"],
        ["acme-corp"],
    ]
    assert payload["text"] == (
        "cachewatch: 3 cache regressions, 1 resolved: scenario `ticket-summary` of "
        "`assistant/acme-70b-instruct`, `search-agent/acme-70b-instruct`, canary deploy "
        "`v5.0.0` of `assistant/m`, tenant `acme-corp` of `assistant/acme-70b-instruct`"
    )


def test_a_service_regression_reads_as_before() -> None:
    """`group` null (or absent: a regression stored before groups) changes nothing."""
    for plain in (regression(), {k: v for k, v in regression().items() if k != "group"}):
        payload = opened(plain)
        assert header(payload) == "assistant/acme-70b-instruct: hit rate 71% → 12%"
        assert "group_by" not in query_of(payload) and "Canary" not in json.dumps(payload)


@pytest.mark.parametrize(
    "odd",
    [None, {}, {"share": "x", "buckets": -1, "baseline": ""}, {"share": 0.1}, [1]],
)
def test_a_canary_without_a_usable_comparison_is_still_called_one(odd: object) -> None:
    """Every deploy group is a canary (section 5a); what `canary` does not say is left out."""
    payload = opened(canary(canary=odd))
    assert_valid(payload)
    assert header(payload).startswith("Canary deploy `v5.0.0` of assistant/m")
    assert "(" not in header(payload) or "of requests" in header(payload)
    sentence = canary_sentence(canary(canary=odd))
    assert sentence is not None and sentence.startswith("Deploy `v5.0.0` ")
    assert "None" not in json.dumps(payload) and "beside ``" not in json.dumps(payload)


def test_a_canary_s_traffic_in_words() -> None:
    assert [share_pct(s) for s in (0.1, 0.004, 0.0, 0.996, 1.0, 0.05)] == [
        "10%",
        "<1%",
        "0%",
        ">99%",
        "100%",
        "5%",
    ]
    assert subject(canary(canary={"baseline": "v4", "share": None, "buckets": 3})) == (
        "canary deploy `v5.0.0` of `assistant/m` (beside `v4`)"
    )
    assert header(opened(canary(canary={"baseline": "v4"}))).startswith(
        "Canary deploy `v5.0.0` of assistant/m (beside v4): hit"
    )
    one = canary_sentence(canary(canary={"baseline": "v4", "share": 0.5, "buckets": 1}))
    assert one is not None and "over the 1 detection bucket compared" in one
    assert canary_sentence(scenario()) is None and canary_sentence(regression()) is None


def named_group(suffix: str) -> dict[str, dict[str, Any]]:
    """Each kind of message about a scenario and a canary whose value, tag and older
    tag end with `suffix` ("" gives ordinary ones)."""
    group = scenario("ticket-summary" + suffix)
    tagged = canary("v5.0.0" + suffix, "v4.9.0" + suffix)
    return {
        "opened": opened(group),
        "resolved": resolved(group),
        "canary_opened": opened(tagged),
        "canary_resolved": resolved(tagged),
        "digest": compose(
            [AlertItem("opened", tagged), AlertItem("resolved", {**group, **RESOLVED})],
            PUBLIC_URL,
        ).payload(),
    }


@pytest.mark.parametrize("suffix", [HOSTILE, HOSTILE_MORE, "`", HOSTILE + HOSTILE_MORE])
def test_hostile_group_values_stay_inside_code_spans(suffix: str) -> None:
    """As for names: with code spans set aside, the hostile messages are the ordinary
    ones; the spans hold nothing that ends them, the line or starts a link."""
    ordinary, hostile = named_group(""), named_group(suffix)
    for kind, payload in hostile.items():
        assert_valid(payload)
        for mine, theirs in zip(texts(payload), texts(ordinary[kind]), strict=True):
            text = mine["text"]
            if mine["type"] == "plain_text":
                assert mine["emoji"] is False
                assert not any(invisible(c) for c in text), (kind, text)
                # The header quotes the group value: a backtick inside cannot close it.
                assert text.count("`") == theirs["text"].count("`"), (kind, text)
                continue
            assert skeleton(text) == skeleton(theirs["text"]), (kind, text)
            for content in CODE_SPAN.findall(text):
                assert not any(invisible(c) for c in content), (kind, content)
                assert "<" not in content and ">" not in content, (kind, content)
                assert re.fullmatch(r"(?:[^&]|&(?:amp|lt|gt);)*", content), (kind, content)
            assert mine.get("verbatim") is True or mine.get("fallback"), (kind, mine)


@pytest.mark.parametrize("kind", ["opened", "resolved", "canary_opened", "digest"])
def test_hostile_group_values_match_golden(kind: str) -> None:
    payload = named_group(HOSTILE)[kind]
    assert_valid(payload)
    check_golden(f"hostile_group_{kind}", payload)


def test_the_hostile_header_reads_as_one_line_and_keeps_our_words() -> None:
    text = header(named_group(HOSTILE)["opened"])
    assert text.startswith("scenario `ticket-summary\\n\\n*:rotating_light: SECURITY: re-login")
    # Too long for the header: the value is cut, the service's name and our words are not.
    assert text.endswith("…` of assistant/acme-70b-instruct: hit rate 71% → 12%")
    assert len(text) == HEADER_MAX
    # Long names share the header's room: each is cut, none of our words is.
    long = canary("v" * 300, "b" * 300, service="s" * 300)
    text = header(opened(long))
    assert len(text) == HEADER_MAX and text.startswith("Canary deploy `vvv")
    assert "…` of sss" in text and "(10% of requests, beside bbb" in text
    assert text.endswith("…): hit rate 71% → 12%")


def test_an_unknown_group_kind_shows_as_text_without_markup() -> None:
    """`by` outside the contract's three: named as plain text, formatting nothing."""
    for suffix in (HOSTILE, HOSTILE_MORE):
        ordinary = opened(regression(group={"by": "region", "value": "eu"}))
        hostile = opened(regression(group={"by": "region" + suffix, "value": "eu"}))
        assert_valid(hostile)
        for mine, theirs in zip(texts(hostile), texts(ordinary), strict=True):
            if mine["type"] == "plain_text":
                assert not any(invisible(c) for c in mine["text"]), mine["text"]
                continue
            found = MARKUP.findall(skeleton(mine["text"]))
            assert found == MARKUP.findall(skeleton(theirs["text"])), mine["text"]
    assert "region `eu` of `assistant/acme-70b-instruct`" in json.dumps(ordinary)


def test_the_dashboard_link_carries_a_hostile_group_encoded() -> None:
    hostile = scenario("ticket" + HOSTILE + HOSTILE_MORE)
    parts = urlsplit(dashboard_url(PUBLIC_URL, hostile))
    assert re.fullmatch(r"[A-Za-z0-9%._~=&-]*", parts.query), parts.query
    query = parse_qs(parts.query)
    assert query["group_by"] == ["scenario"] and query["group_value"] == [hostile["group"]["value"]]
    assert list(query) == ["service", "model", "group_by", "group_value", "from", "to"]


def test_a_stored_group_regression_is_delivered_naming_its_group(
    session: Session,
    session_factory: sessionmaker[Session],
    slack_settings: Settings,
    fake_slack: FakeSlack,
) -> None:
    """The outbox reads the stored regression (`regression_to_json`): its group
    columns reach the message."""
    stored = add_regression(session, group_by="scenario", group_value="ticket-summary")
    session.commit()
    assert deliver_due(session_factory, slack_settings).sent == 1
    [payload] = fake_slack.delivered
    assert header(payload).startswith("scenario `ticket-summary` of assistant/acme-70b-instruct")
    assert query_of(payload)["group_value"] == ["ticket-summary"]
    assert f"regression #{stored.id}" in json.dumps(payload)
