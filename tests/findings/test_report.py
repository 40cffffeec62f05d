"""`cachewatch report`'s renderer: golden Markdown for constructed findings (one per
kind, none, a range that lacks data, a model without prices, findings and
regressions together), the report's order, its JSON, and that the Markdown renders
(markdown-it-py, a CommonMark parser) with names that stay inert."""

import html
import os
import re
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from markdown_it import MarkdownIt

from service.alerts.money import usd_per_day
from service.alerts.wording import FINDING_LABELS, FINDING_TITLES, tokens
from service.findings import KINDS, MISSING_DATA, Finding, FindingsResult
from service.findings.report import (
    ReportRange,
    md_code,
    md_sentence,
    md_text,
    open_in_range,
    report_items,
    report_json,
    report_markdown,
)
from service.ingest.timestamps import parse_ts_text
from tests.alerts.test_message import regression

GOLDEN = Path(__file__).parent / "golden"
# Set to rewrite the golden files after a deliberate change of wording; review the diff.
UPDATE = os.environ.get("CACHEWATCH_UPDATE_GOLDEN") == "1"

SINCE = parse_ts_text("2026-11-20T08:00:00Z")
RANGE = ReportRange(parse_ts_text("2026-11-20T00:00:00Z"), parse_ts_text("2026-11-27T00:00:00Z"))

#: One finding of each kind, priced, as the findings service builds them.
EXAMPLES: dict[str, Finding] = {
    "volatile_segment": Finding(
        kind="volatile_segment",
        service="assistant",
        model="acme-70b-instruct",
        since_us=SINCE,
        share_of_prompt_tokens=0.42,
        wasted_tokens_per_day=120_000_000,
        wasted_usd_per_day=360.0,
        segment="system",
        evidence=[
            "segment `system`: 1,740 variants per hour over 1,800 requests",
            "the blocks after `system` hold 4,100 tokens a request",
        ],
        fix="keep the time and the user's fields out of the system prompt: put them at the "
        "end of the request",
    ),
    "template_drift": Finding(
        kind="template_drift",
        service="assistant",
        model="acme-70b-instruct",
        since_us=SINCE,
        share_of_prompt_tokens=0.4,
        wasted_tokens_per_day=9_400_000,
        wasted_usd_per_day=25.38,
        segment="system",
        evidence=[
            "segment `system` has 2 renderings with one `norm_hash`: "
            "60% of its requests (scenario `web-chat`), 40% (scenario `api-agent`)",
            "both in 96 of the 96 hours",
        ],
        fix="render the part one way everywhere (one template, the same whitespace and "
        "newlines, JSON keys in one order)",
    ),
    "history_rewrite": Finding(
        kind="history_rewrite",
        service="support-bot",
        model="acme-70b-instruct",
        since_us=SINCE,
        share_of_prompt_tokens=0.31,
        wasted_tokens_per_day=48_000_000,
        wasted_usd_per_day=129.6,
        evidence=["34% of continuing session requests rewrite their history"],
        fix="append to the history; summarize only when the context is full, and keep the "
        "summary until the next one",
    ),
    "routing": Finding(
        kind="routing",
        service="assistant",
        model="acme-70b-instruct",
        since_us=SINCE,
        share_of_prompt_tokens=0.12,
        wasted_tokens_per_day=30_500_000,
        wasted_usd_per_day=82.35,
        evidence=["12% of prompt tokens were rewarmed on a replica other than the warm one"],
        fix="route on the `cache_key` (or the prefix) so a session stays on its replica",
    ),
    "cold_fanout": Finding(
        kind="cold_fanout",
        service="research-agent",
        model="acme-70b-instruct",
        since_us=SINCE,
        share_of_prompt_tokens=0.05,
        wasted_tokens_per_day=4_200_000,
        wasted_usd_per_day=11.34,
        evidence=["1,200 requests a day started while their prefix was in prefill"],
        fix="warm the shared start with one request before fanning out",
    ),
    "eviction": Finding(
        kind="eviction",
        service="assistant",
        model="acme-70b-instruct",
        since_us=SINCE,
        share_of_prompt_tokens=0.08,
        wasted_tokens_per_day=21_000_000,
        wasted_usd_per_day=56.7,
        evidence=["the working set reaches 95% of the ceiling at 6.2M tokens per replica"],
        fix="give the KV cache room for the working set (6.2M tokens per replica)",
    ),
    "expiry": Finding(
        kind="expiry",
        service="research-assistant",
        model="claude-sonnet-4-5",
        since_us=SINCE,
        share_of_prompt_tokens=0.22,
        wasted_tokens_per_day=3_100_000,
        wasted_usd_per_day=8.37,
        evidence=["the median pause between a session's turns is 9 min 40 s; the TTL is 5 min"],
        fix='ask for a TTL that covers the pauses (Anthropic `"ttl": "1h"`)',
    ),
    "below_minimum": Finding(
        kind="below_minimum",
        service="classifier",
        model="claude-sonnet-4-5",
        since_us=SINCE,
        share_of_prompt_tokens=0.03,
        wasted_tokens_per_day=640_000,
        wasted_usd_per_day=1.73,
        evidence=["41% of requests are shorter than the model's 1,024-token minimum"],
        fix="put the shared start above the minimum, or stop asking for caching there",
    ),
}


def result(findings: list[Finding], missing: list[str] | None = None) -> FindingsResult:
    return FindingsResult(findings=findings, missing=missing or [], days=7.0)


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.md"
    if UPDATE:
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"{path} is missing: run with CACHEWATCH_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8")


def html_of(markdown: str) -> str:
    return MarkdownIt("commonmark").render(markdown)


@pytest.mark.parametrize(
    ("count", "text"),
    [
        (0, "0 tokens"),
        (1, "1 token"),
        (1.5, "2 tokens"),  # half away from zero, as dollars
        (2.5, "3 tokens"),
        (12_400, "12,400 tokens"),
        (999_999.4, "999,999 tokens"),
        (999_999.5, "1.00M tokens"),  # placed by its rounded value, as dollars
        (48_000_000, "48.0M tokens"),
        (1_234_000_000, "1.23B tokens"),
        (-5, "-5 tokens"),
        (float("nan"), "n/a"),
        (True, "n/a"),
    ],
)
def test_token_counts(count: float, text: str) -> None:
    assert tokens(count) == text


def test_every_kind_has_a_title_and_a_label() -> None:
    assert set(FINDING_TITLES) == set(FINDING_LABELS) == set(KINDS) == set(EXAMPLES)


@pytest.mark.parametrize("kind", KINDS)
def test_one_finding_of_each_kind_matches_golden(kind: str) -> None:
    finding = EXAMPLES[kind]
    text = report_markdown(result([finding]), [], RANGE)
    check_golden(f"kind_{kind}", text)
    page = html_of(text)
    title = FINDING_TITLES[kind]
    assert re.search(rf"<h2>1\. {title}( <code>system</code>)? in ", page)
    assert f"<strong>Kind:</strong> <code>{kind}</code>: {FINDING_LABELS[kind]}" in page
    for line in finding.evidence:
        assert as_html(line) in page, line
    assert f"<strong>Fix:</strong> {as_html(finding.fix)}" in page
    assert usd_per_day(finding.wasted_usd_per_day) in page.split("</h2>")[0]


def as_html(sentence: str) -> str:
    """What markdown-it makes of one of our sentences with names in backticks."""
    escaped = sentence.replace("&", "&amp;").replace('"', "&quot;")
    return re.sub(r"`([^`]*)`", r"<code>\1</code>", escaped)


def test_no_findings_matches_golden() -> None:
    text = report_markdown(result([]), [], RANGE)
    check_golden("none", text)
    assert "No findings and no open regressions in this range." in html_of(text)
    assert "<h2>" not in html_of(text)


def test_missing_data_matches_golden_and_says_what_to_send() -> None:
    missing = ["segments", "sessions", "ttft"]
    text = report_markdown(result([EXAMPLES["routing"]], missing), [], ReportRange(None, None))
    check_golden("missing_data", text)
    page = html_of(text)
    assert "the first record to the last record" in page
    for code in missing:
        assert as_html(MISSING_DATA[code]) in page
    assert as_html(MISSING_DATA["replicas"]) not in page


def test_no_prices_matches_golden_and_is_never_free() -> None:
    unpriced = [replace(f, wasted_usd_per_day=None) for f in EXAMPLES.values()]
    text = report_markdown(result(unpriced), [regression(cost=None)], RANGE)
    check_golden("no_prices", text)
    assert "$" not in text
    assert "no prices" in text.splitlines()[2]
    # Without dollars, the findings by wasted tokens a day, then the regression.
    headings = re.findall(r"^## \d+\. (.+?) in ", text, re.MULTILINE)
    assert headings == [
        "Volatile segment `system`",
        "History rewrite",
        "Routing misses",
        "Eviction",
        "Template drift `system`",
        "Cold fan-out",
        "Cache expiry",
        "Below the caching minimum",
        "Regression #7",
    ]


def test_findings_and_regressions_together_match_golden_worst_first_in_dollars() -> None:
    findings = [*EXAMPLES.values(), replace(EXAMPLES["eviction"], wasted_usd_per_day=None)]
    routing = regression(
        id=9,
        service="search-agent",
        cause="routing",
        change_ts="2026-11-25T10:05:00Z",
        cost={"usd_per_day_before": 300.0, "usd_per_day_after": 400.0, "extra_usd_per_day": 100.0},
        group={"by": "scenario", "value": "web-chat"},
        attributed_to={
            "event_id": 11,
            "kind": "replicas",
            "deploy": None,
            "replicas": 4,
            "ts": "2026-11-25T10:02:00Z",
            "source": "inferred",
            "lag_s": 180,
        },
        evidence=["rewarm tokens: 100% routing", "replicas serving 1 -> 4"],
    )
    regressions = [routing, regression()]
    text = report_markdown(result(findings, ["ttft"]), regressions, RANGE)
    check_golden("report", text)
    items = report_items(findings, regressions)
    dollars = [i.usd_per_day for i in items]
    priced = [d for d in dollars if d is not None]
    assert priced == sorted(priced, reverse=True) and dollars[len(priced) :] == [None]
    assert items[0].regression is not None and items[0].regression["id"] == 7  # $1,240.5
    header = text.splitlines()[2]
    total = sum(f.wasted_usd_per_day or 0.0 for f in findings)
    assert f"**known waste:** {usd_per_day(total)} in 8 of 9 findings (1 without prices)" in header
    assert "**open regressions:** 2, costing +$1,341/day since their change" in header
    page = html_of(text)
    assert page.count("<h2>") == 11
    assert "<h2>1. Regression #7 in <code>assistant</code> / <code>acme-70b-instruct</code>" in page
    assert "(scenario <code>web-chat</code>)" in page
    attributed = "<strong>Attributed to:</strong> the change to 4 replicas at 2026-11-25 10:02 UTC"
    assert attributed in page
    assert "deploy <code>v42</code> at 2026-11-23 14:21 UTC (posted), lag 4 min" in page
    assert "segment <code>system</code> had 1 variant per hour before and 980 after" in page
    assert "unique_prefix_ratio 0.01 -&gt; 0.97" in page
    assert "<strong>What to check:</strong> The start of the request became unique" in page
    assert "<strong>Cost:</strong> costs about $1,241 a day more: $1,651/day" in page


def test_open_regressions_of_the_range() -> None:
    """Open ones whose change came before the range's end, whenever they began;
    resolved ones never."""
    early = regression(id=1, change_ts="2026-11-01T00:00:00Z")
    inside = regression(id=2, change_ts="2026-11-26T23:59:00Z")
    after = regression(id=3, change_ts="2026-11-27T00:00:00Z")
    resolved = regression(id=4, status="resolved", resolved_at="2026-11-24T00:00:00Z")
    chosen = open_in_range([after, inside, early, resolved], RANGE)
    assert [r["id"] for r in chosen] == [2, 1]
    unbounded = open_in_range([after, inside, early, resolved], ReportRange(None, None))
    assert [r["id"] for r in unbounded] == [3, 2, 1]


def test_json_has_the_range_the_findings_and_the_regressions_as_the_api_gives_them() -> None:
    findings = [EXAMPLES["volatile_segment"], EXAMPLES["routing"]]
    outside = regression(id=3, change_ts="2026-11-28T00:00:00Z")
    answer = report_json(result(findings, ["ttft"]), [outside, regression()], RANGE)
    assert orjson.loads(orjson.dumps(answer)) == answer
    assert answer["range"] == {
        "from": "2026-11-20T00:00:00Z",
        "to": "2026-11-27T00:00:00Z",
        "days": 7.0,
    }
    assert answer["missing"] == ["ttft"]
    assert answer["findings"] == [f.as_json() for f in findings]
    assert answer["findings"][0]["since"] == "2026-11-20T08:00:00Z"
    assert answer["regressions"] == [regression()]
    unbounded = report_json(result([]), [], ReportRange(None, None))
    assert unbounded["range"] == {"from": None, "to": None, "days": 7.0}
    assert unbounded["findings"] == unbounded["regressions"] == []


HOSTILE = (
    "\n# heading <script>alert(1)</script> [click](https://evil.example) ![i](x.png)"
    " **bold** _it_ ~~strike~~ `code` ``two`` | a | b |\n- item\n1. first &amp; \u202e"
)


def test_hostile_names_stay_inert() -> None:
    """Names from the records are code spans and nothing else: the report built from
    hostile names renders like the one built from ordinary names once the code
    spans' contents are set aside, and each span holds the name as typed."""

    def named(suffix: str) -> str:
        findings = [
            replace(
                f,
                service=f.service + suffix,
                model=f.model + suffix,
                segment=None if f.segment is None else f.segment + suffix,
                group={"by": "scenario", "value": "web" + suffix},
            )
            for f in EXAMPLES.values()
        ]
        hostile_regression = regression(
            service="assistant" + suffix,
            model="m" + suffix,
            attributed_to={**regression()["attributed_to"], "deploy": "v42" + suffix},
        )
        return html_of(report_markdown(result(findings), [hostile_regression], RANGE))

    plain_page, hostile_page = named(""), named(HOSTILE)
    assert "<script>" not in hostile_page and "<a " not in hostile_page
    assert "<img" not in hostile_page and "<em>" not in hostile_page
    without_code = re.compile(r"<code>.*?</code>", re.DOTALL)
    assert without_code.sub("<code/>", hostile_page) == without_code.sub("<code/>", plain_page)
    spans = re.findall(r"<code>(.*?)</code>", hostile_page, re.DOTALL)
    shown = html.escape(HOSTILE.replace("\n", "\\n").replace("\u202e", "\\u202e"), quote=False)
    assert any(span == "assistant" + shown for span in spans)


def test_a_hostile_name_inside_an_evidence_sentence_formats_nothing() -> None:
    """Evidence names its segments in backticks; a name holding backticks cannot be
    told from the sentence around it, but whatever is read as text is escaped: one
    list item, no link, tag, image or emphasis."""
    finding = replace(EXAMPLES["volatile_segment"], evidence=[f"segment `system{HOSTILE}` varies"])
    page = html_of(report_markdown(result([finding]), [], RANGE))
    evidence = page.split("<strong>Evidence:</strong></p>\n<ul>\n")[1].split("</ul>")[0]
    assert evidence.count("<li>") == 1 and "\n" not in evidence.strip()
    assert re.sub(r"</?(li|code)>", "", evidence).count("<") == 0


@pytest.mark.parametrize(
    ("text", "markdown"),
    [
        ("plain words", "plain words"),
        ("unique_prefix_ratio", "unique_prefix_ratio"),
        ("_edge_ *star* [x](y) <b> a&b | ~s~", r"\_edge\_ \*star\* \[x\](y) \<b> a\&b \| \~s\~"),
        ("# not a heading", r"\# not a heading"),
        ("- not a list", r"\- not a list"),
        ("2. not a list", r"2\. not a list"),
        ("> not a quote", r"\> not a quote"),
        ("two\nlines", r"two\\nlines"),
    ],
)
def test_md_text(text: str, markdown: str) -> None:
    assert md_text(text) == markdown
    page = html_of(markdown)
    assert page.startswith("<p>") and page.count("<p>") == 1


@pytest.mark.parametrize(
    ("name", "markdown", "shown"),
    [
        ("system", "`system`", "system"),
        ("a`b", "``a`b``", "a`b"),
        ("`edge", "`` `edge ``", "`edge"),
        (" spaced ", "`  spaced  `", " spaced "),
        ("", '`""`', "&quot;&quot;"),
        ("<b>&", "`<b>&`", "&lt;b&gt;&amp;"),
    ],
)
def test_md_code(name: str, markdown: str, shown: str) -> None:
    assert md_code(name) == markdown
    assert html_of(markdown) == f"<p><code>{shown}</code></p>\n"


def test_md_sentence_keeps_our_code_spans_and_escapes_the_rest() -> None:
    sentence = "segment `system` had *2* variants"
    assert md_sentence(sentence) == r"segment `system` had \*2\* variants"
    assert md_sentence("one ` backtick") == r"one \` backtick"
    assert html_of(md_sentence('ask for `"ttl": "1h"`')) == (
        "<p>ask for <code>&quot;ttl&quot;: &quot;1h&quot;</code></p>\n"
    )


def test_the_report_is_one_document_of_known_blocks() -> None:
    """Every block of the full report is a heading, paragraph or list: nothing
    a name or a sentence could open (code blocks, quotes, HTML, tables)."""
    findings = list(EXAMPLES.values())
    text = report_markdown(result(findings, list(MISSING_DATA)), [regression()], RANGE)
    tokens = MarkdownIt("commonmark").parse(text)
    kinds = {t.type for t in tokens}
    assert kinds <= {
        "heading_open",
        "heading_close",
        "paragraph_open",
        "paragraph_close",
        "bullet_list_open",
        "bullet_list_close",
        "list_item_open",
        "list_item_close",
        "inline",
    }, kinds
    assert sum(t.type == "heading_open" and t.tag == "h2" for t in tokens) == len(findings) + 1
