"""The Slack message: golden JSON for a fixed regression, slack_sdk validation of
every block, mrkdwn escaping, the dashboard link, a sentence per cause, digests."""

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from slack_sdk.errors import SlackObjectFormationError
from slack_sdk.models.blocks import Block, SectionBlock

from service.alerts.message import (
    MAX_BLOCKS,
    AlertItem,
    SlackMessage,
    compose,
    webhook_test_message,
)
from service.alerts.wording import CAUSE_LABELS, cause_sentence, cost_line, cost_phrase
from tests.alerts.fake_slack import slack_check

GOLDEN = Path(__file__).parent / "golden"
PUBLIC_URL = "https://cachewatch.example.com/"
# Set to rewrite the golden files after a deliberate change of wording; review the diff.
UPDATE = os.environ.get("CACHEWATCH_UPDATE_GOLDEN") == "1"


def regression(**changes: Any) -> dict[str, Any]:
    """The contract's example regression (section 5), as the API shows it."""
    base: dict[str, Any] = {
        "id": 7,
        "service": "assistant",
        "model": "acme-70b-instruct",
        "change_ts": "2026-11-23T14:25:00Z",
        "detected_at": "2026-11-23T14:45:00Z",
        "status": "open",
        "resolved_at": None,
        "before": {
            "hit_rate": 0.71,
            "cacheable_fraction": 0.80,
            "rewarm_share": 0.05,
            "unique_prefix_ratio": 0.01,
        },
        "after": {
            "hit_rate": 0.12,
            "cacheable_fraction": 0.14,
            "rewarm_share": 0.02,
            "unique_prefix_ratio": 0.97,
        },
        "attributed_to": {
            "event_id": 3,
            "kind": "deploy",
            "deploy": "v42",
            "replicas": None,
            "ts": "2026-11-23T14:21:00Z",
            "source": "posted",
            "lag_s": 240,
        },
        "cause": "prefix_instability",
        "group": None,
        "cost": {
            "usd_per_day_before": 410.0,
            "usd_per_day_after": 1650.5,
            "extra_usd_per_day": 1240.5,
        },
        "evidence": [
            "segment `system` had 1 variant per hour before and 980 after",
            "unique_prefix_ratio 0.01 -> 0.97 (distinct request starts per request)",
        ],
    }
    return {**base, **changes}


RESOLVED = {"status": "resolved", "resolved_at": "2026-11-23T18:40:00Z"}


def assert_valid(payload: dict[str, Any]) -> None:
    """Each block passes slack_sdk's validation after a round trip through its models,
    and the message as a whole is what Slack accepts."""
    assert 0 < len(payload["blocks"]) <= MAX_BLOCKS
    for block in payload["blocks"]:
        parsed = Block.parse(block)
        assert parsed is not None, block
        parsed.validate_json()
        assert parsed.to_dict() == block
    assert slack_check(payload) is None
    assert payload["text"]


def check_golden(name: str, payload: dict[str, Any]) -> None:
    path = GOLDEN / f"{name}.json"
    rendered = json.dumps(payload, indent=2, ensure_ascii=False, sort_keys=True) + "\n"
    if UPDATE:
        path.write_text(rendered)
    assert path.exists(), f"{path} is missing: run with CACHEWATCH_UPDATE_GOLDEN=1"
    assert rendered == path.read_text()


def test_opened_message_matches_golden() -> None:
    payload = compose([AlertItem("opened", regression())], PUBLIC_URL).payload()
    assert_valid(payload)
    check_golden("opened", payload)
    blocks = payload["blocks"]
    assert blocks[0]["text"]["text"] == "assistant/acme-70b-instruct: hit rate 71% → 12%"
    body = json.dumps(blocks)
    assert "deploy `v42`" in body and "lag 4 min" in body
    assert "The start of the request became unique after deploy `v42`" in body
    assert "segment `system` had 1 variant per hour before and 980 after" in body
    cost = "the drop costs about $1,241 a day more: $1,651/day, against $410/day"
    assert cost in blocks[1]["text"]["text"]
    assert "it costs about $1,241 a day more." in payload["text"]


def test_resolved_message_matches_golden_and_is_shorter() -> None:
    item = AlertItem("resolved", regression(**RESOLVED))
    payload = compose([item], PUBLIC_URL).payload()
    assert_valid(payload)
    check_golden("resolved", payload)
    opened = compose([AlertItem("opened", regression())], PUBLIC_URL).payload()
    assert len(payload["blocks"]) < len(opened["blocks"])
    assert len(json.dumps(payload)) < len(json.dumps(opened)) / 2
    assert "recovered at 2026-11-23 18:40 UTC, after 4 h 15 min" in payload["text"]


def test_digest_matches_golden() -> None:
    items = [
        AlertItem("opened", regression()),
        AlertItem(
            "opened",
            regression(
                id=8,
                service="search-agent",
                cause="routing",
                attributed_to={
                    "event_id": 9,
                    "kind": "replicas",
                    "deploy": None,
                    "replicas": 4,
                    "ts": "2026-11-23T14:30:00Z",
                    "source": "inferred",
                    "lag_s": -300,
                },
            ),
        ),
        AlertItem("resolved", regression(id=5, service="billing", cost=None, **RESOLVED)),
    ]
    payload = compose(items, PUBLIC_URL).payload()
    assert_valid(payload)
    check_golden("digest", payload)
    assert payload["blocks"][0]["text"]["text"] == "cachewatch: 2 cache regressions, 1 resolved"
    assert "the change to 4 replicas" in json.dumps(payload)
    entries = [b["text"]["text"] for b in payload["blocks"][1:3]]
    assert all("\n*Cost:* the drop costs about $1,241 a day more\n" in e for e in entries)


def test_opened_and_resolved_together_make_one_entry() -> None:
    """A regression found already over: one message that says so, not two."""
    resolved = regression(**RESOLVED)
    items = [AlertItem("opened", resolved), AlertItem("resolved", resolved)]
    payload = compose(items, PUBLIC_URL).payload()
    assert_valid(payload)
    assert payload["blocks"][0]["type"] == "header"
    assert "hit rate 71% → 12%" in payload["blocks"][0]["text"]["text"]
    assert "*Already resolved:* recovered at 2026-11-23 18:40 UTC" in json.dumps(
        payload, ensure_ascii=False
    )


def test_dashboard_link_is_filtered_and_url_encoded() -> None:
    payload = compose(
        [AlertItem("opened", regression(service="chat & co", model="org/model v2?x=1"))],
        "https://cw.example.com/base/",
    ).payload()
    link_block = next(b for b in payload["blocks"] if "Open the dashboard" in json.dumps(b))
    text = link_block["text"]["text"]
    url = text[1 : text.index("|")].replace("&amp;", "&")
    parts = urlsplit(url)
    assert (parts.scheme, parts.netloc, parts.path) == ("https", "cw.example.com", "/base/")
    # The query's only raw separators are the four parameters'.
    assert parts.query.count("&") == 3 and " " not in parts.query and "/" not in parts.query
    assert parse_qs(parts.query) == {
        "service": ["chat & co"],
        "model": ["org/model v2?x=1"],
        "from": ["2026-11-23T11:25:00Z"],
        "to": ["2026-11-23T17:25:00Z"],
    }


def test_user_strings_are_escaped_in_mrkdwn() -> None:
    hostile = regression(
        service="<!channel> & co",
        model="m<b>",
        attributed_to={
            "event_id": 1,
            "kind": "deploy",
            "deploy": "v1 <https://evil.example|click>",
            "replicas": None,
            "ts": "2026-11-23T14:21:00Z",
            "source": "posted",
            "lag_s": 1,
        },
        evidence=["segment `<@U123>` changed & more"],
    )
    for items in (
        [AlertItem("opened", hostile)],
        [AlertItem("resolved", {**hostile, **RESOLVED})],
        [AlertItem("opened", hostile), AlertItem("opened", regression(id=9))],
    ):
        payload = compose(items, PUBLIC_URL).payload()
        assert_valid(payload)
        texts = [payload["text"]] + [
            t["text"] for t in _text_objects(payload["blocks"]) if t["type"] == "mrkdwn"
        ]
        for text in texts:
            assert "<!channel>" not in text and "<@U123>" not in text
            assert "<https://evil" not in text and "<b>" not in text
            # Every `<` left opens one of our own links.
            assert text.count("<") == text.count("<https://cachewatch.example.com/?")
        joined = "\n".join(texts)
        assert "&lt;!channel&gt; &amp; co" in joined


def _text_objects(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found = []
    for block in blocks:
        if "text" in block:
            found.append(block["text"])
        found += block.get("fields", [])
        found += block.get("elements", [])
    return found


@pytest.mark.parametrize("cause", sorted(CAUSE_LABELS))
def test_one_sentence_per_cause(cause: str) -> None:
    payload = compose([AlertItem("opened", regression(cause=cause))], PUBLIC_URL).payload()
    assert_valid(payload)
    cause_block = payload["blocks"][2]["text"]["text"]
    title, sentence = cause_block.split("\n")
    assert title == f"*Likely cause: {CAUSE_LABELS[cause]}*"
    assert sentence.count(". ") == 0 and sentence.endswith(("?", "."))
    assert "after deploy `v42`" in sentence


def test_other_causes_are_distinct_sentences() -> None:
    sentences = {
        compose([AlertItem("opened", regression(cause=c))], PUBLIC_URL).payload()["blocks"][2][
            "text"
        ]["text"]
        for c in CAUSE_LABELS
    }
    assert len(sentences) == len(CAUSE_LABELS)


def test_no_attribution_and_missing_values() -> None:
    payload = compose(
        [
            AlertItem(
                "opened",
                regression(attributed_to=None, evidence=[], after={"hit_rate": None}),
            )
        ],
        PUBLIC_URL,
    ).payload()
    assert_valid(payload)
    body = json.dumps(payload)
    assert "none recorded near the drop" in body and "n/a" in body
    assert "Evidence" not in body


def test_long_strings_stay_within_slack_limits() -> None:
    long = regression(
        service="s" * 100,
        model="m" * 200,
        evidence=[f"line {i} " + "x" * 500 for i in range(40)],
    )
    payload = compose([AlertItem("opened", long)], PUBLIC_URL).payload()
    assert_valid(payload)
    assert len(payload["blocks"][0]["text"]["text"]) <= 150
    evidence = next(b for b in payload["blocks"] if "*Evidence*" in json.dumps(b))
    assert len(evidence["text"]["text"]) <= 3000 and "more" in evidence["text"]["text"]


def test_a_big_digest_stays_within_fifty_blocks() -> None:
    items = [AlertItem("opened", regression(id=i)) for i in range(1, 80)]
    payload = compose(items, PUBLIC_URL).payload()
    assert_valid(payload)
    assert len(payload["blocks"]) == MAX_BLOCKS
    assert "…and 32 more." in json.dumps(payload, ensure_ascii=False)


def test_an_invalid_message_is_refused_before_sending() -> None:
    too_long = SectionBlock(text="x" * 3001)
    with pytest.raises(SlackObjectFormationError):
        SlackMessage(text="t", blocks=(too_long,)).payload()
    with pytest.raises(SlackObjectFormationError):
        SlackMessage(text="", blocks=(SectionBlock(text="x"),)).payload()


def test_test_message_is_valid() -> None:
    assert_valid(webhook_test_message(PUBLIC_URL).payload())


def test_prefix_cause_names_the_part_that_started_varying() -> None:
    tools = regression(evidence=["segment `tools` had 1 variant per hour before and 2326 after"])
    sentence = cause_sentence(tools)
    assert "`tools` went from 1 to 2326 variants an hour" in sentence
    assert "floating order" in sentence
    # Without segments in the records, the question stays generic.
    assert "top of the prompt" in cause_sentence(regression(evidence=[]))


def test_without_prices_nothing_is_said_about_money() -> None:
    """A model without prices has `cost` null: no dollars, and no "$0" either."""
    for unpriced in (regression(cost=None), {k: v for k, v in regression().items() if k != "cost"}):
        for items in (
            [AlertItem("opened", unpriced)],
            [AlertItem("opened", unpriced), AlertItem("opened", {**unpriced, "id": 9})],
            [AlertItem("resolved", {**unpriced, **RESOLVED})],
        ):
            payload = compose(items, PUBLIC_URL).payload()
            assert_valid(payload)
            dumped = json.dumps(payload, ensure_ascii=False)
            assert "$" not in dumped and "cost" not in dumped.lower(), dumped


def test_cost_wording_for_a_cheaper_change_and_a_malformed_cost() -> None:
    cheaper = regression(
        cost={"usd_per_day_before": 12.0, "usd_per_day_after": 11.58, "extra_usd_per_day": -0.42}
    )
    assert cost_phrase(cheaper) == "costs about $0.42 a day less"
    assert cost_line(cheaper) == (
        "costs about $0.42 a day less: $11.58/day, against $12.00/day at the cost per "
        "prompt token before"
    )
    for bad in ({"extra_usd_per_day": 3.0}, {"extra_usd_per_day": "x"}, [1, 2], "cheap"):
        assert cost_phrase(regression(cost=bad)) is None and cost_line(regression(cost=bad)) is None
        assert_valid(compose([AlertItem("opened", regression(cost=bad))], PUBLIC_URL).payload())


@pytest.mark.parametrize(
    ("cause", "words"),
    [
        ("expiry", ("TTL", '`"ttl": "1h"`')),
        ("below_minimum", ("caching minimum", "1,024 tokens")),
    ],
)
def test_the_managed_provider_causes_have_their_own_words(
    cause: str, words: tuple[str, ...]
) -> None:
    payload = compose([AlertItem("opened", regression(cause=cause))], PUBLIC_URL).payload()
    title, sentence = payload["blocks"][2]["text"]["text"].split("\n")
    assert title == f"*Likely cause: {CAUSE_LABELS[cause]}*"
    assert all(w in sentence for w in words), sentence
    assert f"likely cause: {CAUSE_LABELS[cause]};" in payload["text"]
