"""Names are data: a service, model, deploy tag or segment named to look like part of
the alert (newlines, mrkdwn, mentions, links, emoji shortcodes) renders inert in every
text of the message: the header, the sections, fields and context, and the
notification fallback `text`.

The main check compares a message built from hostile names with the same message
built from ordinary ones: with the contents of every inline code span set aside, the
two are identical, so the hostile strings sit only inside code spans, where Slack
formats nothing; and the spans' contents hold no newline, backtick or raw `&<>`."""

import re
import unicodedata
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from service.alerts.links import dashboard_url
from service.alerts.message import AlertItem, compose
from service.alerts.mrkdwn import clip_mrkdwn, code, plain, visible
from tests.alerts.test_message import PUBLIC_URL, RESOLVED, assert_valid, check_golden, regression

# The review's example: after two newlines, a bold line with an emoji and a live link.
HOSTILE = "\n\n*:rotating_light: SECURITY: re-login at https://evil.example/login now*"
# Everything else Slack would act on: mentions, a link, quote, code, strike, italic,
# a list, an email, a carriage return, a Unicode line separator, a bidi override.
HOSTILE_MORE = (
    " <!channel> <@U123> <#C42> <https://evil.example|click> `code` ~strike~ _it_"
    "\r\n> quoted\n- item\n1. first me@evil.example\u2028next\u202egnp.exe"
)


def named(suffix: str) -> dict[str, Any]:
    """The contract's regression with `suffix` after each name; "" gives ordinary names."""
    return regression(
        service="assistant" + suffix,
        model="acme-70b-instruct" + suffix,
        attributed_to={
            "event_id": 3,
            "kind": "deploy",
            "deploy": "v42" + suffix,
            "replicas": None,
            "ts": "2026-11-23T14:21:00Z",
            "source": "posted",
            "lag_s": 240,
        },
        evidence=[
            f"segment `system{suffix}` had 1 variant per hour before and 980 after",
            "unique_prefix_ratio 0.01 -> 0.97 (distinct request starts per request)",
        ],
    )


def messages(suffix: str) -> dict[str, dict[str, Any]]:
    """Each kind of message about regressions so named: opening, resolution, digest."""
    one = named(suffix)
    other = {**named(suffix + " 2"), "id": 8}
    return {
        "opened": compose([AlertItem("opened", one)], PUBLIC_URL).payload(),
        "resolved": compose([AlertItem("resolved", {**one, **RESOLVED})], PUBLIC_URL).payload(),
        "digest": compose(
            [AlertItem("opened", one), AlertItem("resolved", {**other, **RESOLVED})], PUBLIC_URL
        ).payload(),
    }


def texts(payload: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every text object of the message, and the fallback `text` as a mrkdwn one."""
    yield {"type": "mrkdwn", "text": payload["text"], "fallback": True}
    for block in payload["blocks"]:
        if "text" in block:
            yield block["text"]
        yield from block.get("fields", [])
        yield from block.get("elements", [])


CODE_SPAN = re.compile(r"`([^`]*)`")
OUR_LINK = re.compile(r"<https://cachewatch\.example\.com/\?[^|<>\s]*\|[A-Za-z ]+>")


def skeleton(text: str) -> str:
    """The text with each code span's content and each dashboard URL's query left out."""
    return OUR_LINK.sub("<dashboard>", CODE_SPAN.sub("`…`", text))


def invisible(char: str) -> bool:
    return unicodedata.category(char) in {"Cc", "Cf", "Zl", "Zp"}


@pytest.mark.parametrize("suffix", [HOSTILE, HOSTILE_MORE, HOSTILE + HOSTILE_MORE])
def test_hostile_names_stay_inside_code_spans(suffix: str) -> None:
    ordinary, hostile = messages(""), messages(suffix)
    for kind, payload in hostile.items():
        assert_valid(payload)
        plain = list(texts(ordinary[kind]))
        found = list(texts(payload))
        assert [t["type"] for t in found] == [t["type"] for t in plain], kind
        for mine, theirs in zip(found, plain, strict=True):
            text = mine["text"]
            if mine["type"] == "plain_text":
                # Headers: Slack parses nothing there; nothing may break the line.
                assert mine["emoji"] is False
                assert not any(invisible(c) for c in text), (kind, text)
                continue
            # Nothing outside code spans differs from the ordinary names' message...
            assert skeleton(text) == skeleton(theirs["text"]), (kind, text)
            # ...and inside them nothing ends the span, the line or starts a link.
            for content in CODE_SPAN.findall(text):
                assert not any(invisible(c) for c in content), (kind, content)
                assert "<" not in content and ">" not in content, (kind, content)
                assert re.fullmatch(r"(?:[^&]|&(?:amp|lt|gt);)*", content), (kind, content)
                assert not content.startswith(" ") and not content.endswith(" ")
            # No automatic links, mentions or channel names in any block text.
            assert mine.get("verbatim") is True or mine.get("fallback"), (kind, mine)


def test_the_reviews_example_reads_as_one_line_of_data() -> None:
    payload = messages(HOSTILE)["opened"]
    shown = "\\n\\n*:rotating_light: SECURITY: re-login at https://evil.example/login now*"
    assert payload["blocks"][0]["text"]["text"].startswith(f"assistant{shown}/acme-70b")
    link_block = payload["blocks"][5]["text"]["text"]
    assert f"on `assistant{shown}/acme-70b-instruct{shown}`, 3 hours" in link_block
    assert f"deploy `v42{shown}` at" in payload["blocks"][1]["text"]["text"]
    assert payload["text"].startswith(f"Cache regression: `assistant{shown}/acme-70b")


@pytest.mark.parametrize("kind", ["opened", "resolved", "digest"])
def test_hostile_names_match_golden(kind: str) -> None:
    payload = messages(HOSTILE)[kind]
    assert_valid(payload)
    check_golden(f"hostile_{kind}", payload)


def strange(suffix: str) -> dict[str, Any]:
    """Data other than names with `suffix`: an evidence line in a form this module
    does not recognise, and a cause, event kind and source outside the known ones."""
    return regression(
        cause="odd" + suffix,
        attributed_to={
            "event_id": 1,
            "kind": "rollout" + suffix,
            "deploy": None,
            "replicas": None,
            "ts": "2026-11-23T14:21:00Z",
            "source": "bot" + suffix,
            "lag_s": 60,
        },
        evidence=["a new line" + suffix, "segment `x` changed" + suffix],
    )


# What makes a line, formatting, a mention or link, or an emoji in mrkdwn.
MARKUP = re.compile(
    r"\n|[*~`<>]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])|:[A-Za-z0-9_+-]+:|"
    r"&(?!amp;|lt;|gt;)|[\x00-\x1f\x7f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)


@pytest.mark.parametrize("suffix", [HOSTILE, HOSTILE_MORE])
def test_other_data_shows_as_text_without_markup(suffix: str) -> None:
    """Outside code spans, the hostile message has exactly the markup of the ordinary
    one: the data adds no line, formatting, mention, link or emoji."""
    for kind in ("opened", "resolved"):
        ordinary = compose([AlertItem(kind, strange(""))], PUBLIC_URL).payload()
        hostile = compose([AlertItem(kind, strange(suffix))], PUBLIC_URL).payload()
        assert_valid(hostile)
        for mine, theirs in zip(texts(hostile), texts(ordinary), strict=True):
            if mine["type"] == "plain_text":
                assert not any(invisible(c) for c in mine["text"]), mine["text"]
                continue
            found = MARKUP.findall(skeleton(mine["text"]))
            assert found == MARKUP.findall(skeleton(theirs["text"])), mine["text"]


def test_a_cut_never_leaves_a_code_span_or_link_open() -> None:
    """Names long enough to overflow a section: the cut falls between spans."""
    long = "x" * 2_900 + HOSTILE
    payloads = [
        compose([AlertItem("opened", named(long))], PUBLIC_URL).payload(),
        compose(
            [AlertItem("opened", named(long)), AlertItem("opened", named(""))], PUBLIC_URL
        ).payload(),
    ]
    for payload in payloads:
        assert_valid(payload)
        for found in texts(payload):
            if found["type"] == "mrkdwn":
                text = found["text"]
                assert text.count("`") % 2 == 0, text[-80:]
                assert text.count("<") == text.count(">"), text[-80:]
                assert not re.search(r"&[a-z]{0,3}$", text.rstrip("…"))


def test_the_dashboard_link_carries_hostile_names_encoded() -> None:
    hostile = named(HOSTILE + HOSTILE_MORE)
    url = dashboard_url(PUBLIC_URL, hostile)
    parts = urlsplit(url)
    # Only unreserved characters and percent escapes: nothing ends the `<url|label>`.
    assert re.fullmatch(r"[A-Za-z0-9%._~=&-]*", parts.query), parts.query
    query = parse_qs(parts.query)
    assert query["service"] == [hostile["service"]] and query["model"] == [hostile["model"]]


def test_the_renderings_of_data() -> None:
    # Names: as typed in a span; what would end it or the line shows as an escape.
    assert code("acme-70b_instruct *v2*") == "`acme-70b_instruct *v2*`"
    assert code(" a`b\n<!here>&\u202e") == "`\\x20a\u02cbb\\n&lt;!here&gt;&amp;\\u202e`"
    assert code("") == '`""`' and code("  ") == "`\\x20\\x20`"
    # Other data: underscores inside words stay, markup becomes look-alikes.
    assert plain("unique_prefix_ratio 0.01 -> 0.97") == "unique_prefix_ratio 0.01 -&gt; 0.97"
    assert plain("*b* _i_ ~s~ `c` :fire: a:b") == (
        "\u2217b\u2217 \u02cdi\u02cd \u223cs\u223c \u02cbc\u02cb \ua789fire\ua789 a:b"
    )
    assert visible("a\r\n\tb\u2028") == "a\\r\\n\\tb\\u2028"
    # A cut moves back to before the span, link or entity it would leave open.
    assert clip_mrkdwn("on `assistant` now", 9) == "on …"
    assert clip_mrkdwn("see <https://x.example|it>", 12) == "see …"
    assert clip_mrkdwn("a &amp; b", 5) == "a …"
    assert clip_mrkdwn("short", 5) == "short"
