"""`cachewatch report`: the findings (contract section 5b) and the open regressions
(section 5) of a range as one text, Markdown a team lead pastes into a ticket or the
JSON a script reads. Pure: it takes the `FindingsResult` and the regressions as
`GET /v1/regressions` answers them (`regression_to_json`) and returns text.

What it lists:

* every finding of the result, and every OPEN regression whose change came before
  the end of the range (`open_in_range`): open means not recovered yet, so one that
  began before the range still costs inside it;
* worst first in dollars a day where they are known (a finding's
  `wasted_usd_per_day`, a regression's `cost.extra_usd_per_day`), then the
  findings without prices by wasted tokens a day, then the regressions without
  prices (which have no token figure), newest first (`report_items`);
* a header line: the range, the findings' total known waste a day, the open
  regressions' extra cost a day, and under it the MISSING_DATA sentences of what
  the records lack. The regressions' cost is not added to the waste: an open
  regression's extra spend is, most often, the waste of a finding of the same range
  (a deploy that made `system` volatile is also a `volatile_segment` finding), so
  the sum would count it twice.

The words come from their one home: dollars from `service.alerts.money`, percents,
token counts, times, a cause's sentence and an attribution from
`service.alerts.wording`, a kind's fix from the finding itself.

Markdown safety: every string that comes from the records (service, model, segment
and group names, deploy tags) is a code span (`md_code`) or escaped text
(`md_text`), so no name opens a link, an HTML tag, a heading or a list. The
wording's sentences are Slack mrkdwn (names as code spans with `&<>` as entities,
other data with look-alikes for `*`, `~` and backticks): `_from_mrkdwn` keeps their
code spans as code spans and escapes the rest. A finding's evidence and fix are our
sentences with names in backticks (`md_sentence`)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from service.alerts.money import usd_per_day
from service.alerts.mrkdwn import visible
from service.alerts.wording import (
    FINDING_LABELS,
    FINDING_TITLES,
    attribution_line,
    cause_label,
    cause_sentence,
    cost_line,
    duration,
    evidence_line,
    pct,
    tokens,
    when,
)
from service.findings.kinds import MISSING_DATA, Finding, FindingsResult
from service.ingest.timestamps import parse_ts_text
from service.rfc3339 import us_to_rfc3339

_DAY_S = 86_400.0

Regression = Mapping[str, Any]


@dataclass(frozen=True)
class ReportRange:
    """The range asked for, epoch microseconds, [from_us, to_us); None: unbounded."""

    from_us: int | None
    to_us: int | None


@dataclass(frozen=True)
class ReportItem:
    """One entry of the report: a finding or a regression, with the dollars and
    tokens a day it is ordered by (None: not known)."""

    finding: Finding | None
    regression: Regression | None
    usd_per_day: float | None
    tokens_per_day: int | None


def open_in_range(regressions: Iterable[Regression], range_: ReportRange) -> list[Regression]:
    """The open regressions (in their order) whose change came before the end of the
    range: still not recovered, they cost inside it whenever they began."""
    return [
        r
        for r in regressions
        if r.get("status") == "open"
        and (range_.to_us is None or parse_ts_text(str(r["change_ts"])) < range_.to_us)
    ]


def regression_usd(regression: Regression) -> float | None:
    """`cost.extra_usd_per_day`, None when the regression has no cost (no prices)."""
    cost = regression.get("cost")
    if not isinstance(cost, Mapping):
        return None
    extra = cost.get("extra_usd_per_day")
    return float(extra) if isinstance(extra, int | float) and not isinstance(extra, bool) else None


def report_items(
    findings: Sequence[Finding], regressions: Sequence[Regression]
) -> list[ReportItem]:
    """Worst first (module docstring): known dollars a day, most first; then the
    findings without prices, most wasted tokens first; then the regressions without
    prices. Ties keep the findings' order (worst first) before the regressions'
    (newest first)."""
    items = [
        ReportItem(f, None, f.wasted_usd_per_day, f.wasted_tokens_per_day) for f in findings
    ] + [ReportItem(None, r, regression_usd(r), None) for r in regressions]

    def rank(item: ReportItem) -> tuple[int, float]:
        if item.usd_per_day is not None:
            return 0, -item.usd_per_day
        if item.tokens_per_day is not None:
            return 1, -float(item.tokens_per_day)
        return 2, 0.0

    return sorted(items, key=rank)


# -- JSON ----------------------------------------------------------------------


def report_json(
    result: FindingsResult, regressions: Sequence[Regression], range_: ReportRange
) -> dict[str, Any]:
    """`{"range", "missing", "findings", "regressions"}`: the findings as the
    contract's JSON, worst first; the open regressions of the range as
    `GET /v1/regressions` answers them, newest first; `missing` the MISSING_DATA
    codes of what the records lack."""
    return {
        "range": {
            "from": None if range_.from_us is None else us_to_rfc3339(range_.from_us),
            "to": None if range_.to_us is None else us_to_rfc3339(range_.to_us),
            "days": result.days,
        },
        "missing": list(result.missing),
        "findings": [f.as_json() for f in result.findings],
        "regressions": [dict(r) for r in open_in_range(regressions, range_)],
    }


# -- Markdown ------------------------------------------------------------------


def report_markdown(
    result: FindingsResult, regressions: Sequence[Regression], range_: ReportRange
) -> str:
    """The report as CommonMark (module docstring): a title, the header line, what
    the records lack, then one section per finding or regression, worst first."""
    chosen = open_in_range(regressions, range_)
    blocks = ["# cachewatch report", _header(result, chosen, range_)]
    if result.missing:
        blocks.append("The records lack what some findings need:")
        blocks.append("\n".join(f"- {md_sentence(MISSING_DATA[m])}" for m in result.missing))
    items = report_items(result.findings, chosen)
    if not items:
        blocks.append("No findings and no open regressions in this range.")
    for number, item in enumerate(items, start=1):
        if item.finding is not None:
            blocks.extend(_finding_blocks(number, item.finding))
        elif item.regression is not None:
            blocks.extend(_regression_blocks(number, item.regression))
    return "\n\n".join(blocks) + "\n"


def _header(result: FindingsResult, chosen: Sequence[Regression], range_: ReportRange) -> str:
    start = "the first record" if range_.from_us is None else _when_us(range_.from_us)
    end = "the last record" if range_.to_us is None else _when_us(range_.to_us)
    span = f"**Range:** {start} to {end} ({duration(result.days * _DAY_S)} of data)"
    return " · ".join((span, _waste_phrase(result.findings), _regressions_phrase(chosen)))


def _waste_phrase(findings: Sequence[Finding]) -> str:
    if not findings:
        return "**known waste:** no findings"
    priced = [f.wasted_usd_per_day for f in findings if f.wasted_usd_per_day is not None]
    wasted = tokens(sum(f.wasted_tokens_per_day for f in findings))
    count = _count(len(findings), "finding")
    if not priced:
        return f"**known waste:** {wasted} a day in {count} (no prices)"
    if len(priced) == len(findings):
        return f"**known waste:** {usd_per_day(sum(priced))} and {wasted} a day in {count}"
    return (
        f"**known waste:** {usd_per_day(sum(priced))} in {len(priced)} of {count} "
        f"({len(findings) - len(priced)} without prices), {wasted} a day in all"
    )


def _regressions_phrase(chosen: Sequence[Regression]) -> str:
    if not chosen:
        return "**open regressions:** none"
    extras = [e for e in map(regression_usd, chosen) if e is not None]
    text = f"**open regressions:** {len(chosen)}"
    if extras:
        of = "" if len(extras) == len(chosen) else f" ({len(extras)} priced)"
        text += f"{of}, costing {usd_per_day(sum(extras), signed=True)} since their change"
    else:
        text += " (no prices)"
    return text


def _finding_blocks(number: int, f: Finding) -> list[str]:
    title = FINDING_TITLES.get(f.kind, f.kind)
    segment = f" {md_code(f.segment)}" if f.segment is not None else ""
    money = usd_per_day(f.wasted_usd_per_day)
    where = f"{md_code(f.service)} / {md_code(f.model)}" + _group(f.group)
    label = FINDING_LABELS.get(f.kind)
    facts = [
        f"- **Kind:** {md_code(f.kind)}" + (f": {md_text(label)}" if label else ""),
        f"- **Affects:** {pct(f.share_of_prompt_tokens)} of the prompt tokens, "
        f"since {_when_us(f.since_us)}",
        f"- **Wasted:** {tokens(f.wasted_tokens_per_day)} a day, {money}",
    ]
    return [
        f"## {number}. {md_text(title)}{segment} in {where}: {money}",
        "\n".join(facts),
        *_evidence([md_sentence(line) for line in f.evidence]),
        f"**Fix:** {md_sentence(f.fix)}",
    ]


def _regression_blocks(number: int, r: Regression) -> list[str]:
    before, after = r.get("before") or {}, r.get("after") or {}
    extra = regression_usd(r)
    money = "no prices" if extra is None else f"{usd_per_day(extra, signed=True)}"
    where = f"{md_code(str(r['service']))} / {md_code(str(r['model']))}" + _group(r.get("group"))
    cost = cost_line(r)
    facts = [
        f"- **Cause:** {md_code(str(r.get('cause')))}: {_from_mrkdwn(cause_label(r))}",
        f"- **Hit rate:** {pct(before.get('hit_rate'))} before, "
        f"{pct(after.get('hit_rate'))} after, since {md_text(when(str(r['change_ts'])))}",
        f"- **Attributed to:** {_from_mrkdwn(attribution_line(r))}",
        f"- **Cost:** {_from_mrkdwn(cost) if cost else usd_per_day(None)}",
    ]
    return [
        f"## {number}. Regression #{md_text(str(r.get('id')))} in {where}: {money}",
        "\n".join(facts),
        *_evidence([_from_mrkdwn(evidence_line(str(line))) for line in r.get("evidence") or []]),
        f"**What to check:** {_from_mrkdwn(cause_sentence(r))}",
    ]


def _evidence(lines: list[str]) -> list[str]:
    if not lines:
        return []
    return ["**Evidence:**", "\n".join(f"- {line}" for line in lines)]


def _group(group: object) -> str:
    """` (scenario `web-chat`)` for a finding or regression of one group."""
    if not isinstance(group, Mapping) or "value" not in group:
        return ""
    return f" ({md_text(str(group.get('by', 'group')))} {md_code(str(group['value']))})"


def _when_us(ts_us: int) -> str:
    return md_text(when(us_to_rfc3339(ts_us)))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


# -- Markdown escaping -----------------------------------------------------------

# Characters that format inline in CommonMark or GFM wherever they are: emphasis,
# code, links and images, raw HTML and autolinks (`>` only quotes at a line's start),
# entities, tables, strikethrough, escapes.
_INLINE = re.compile(r"([\\`*\[\]<&|~])")
# An underscore at a word's edge can open or close emphasis; inside one it cannot.
_EDGE_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
# What makes a line's start a block of its own: a heading, quote, list item, rule or
# setext underline (the fences' backticks and tables' pipes are escaped inline),
# and an ordered list item's `1.` or `1)`.
_BLOCK_MARK = re.compile(r"^([#>+\-=])")
_ORDERED_MARK = re.compile(r"^(\d+)([.)])")


def _inline(text: str) -> str:
    """Every inline marker of `text` backslash-escaped (a backslash before ASCII
    punctuation is an escape anywhere in CommonMark); `snake_case` stays as typed."""
    return _EDGE_UNDERSCORE.sub(r"\\_", _INLINE.sub(r"\\\1", text))


def _block_safe(markdown: str) -> str:
    """A start that could open a block (where this text begins a line) escaped."""
    return _ORDERED_MARK.sub(r"\1\\\2", _BLOCK_MARK.sub(r"\\\1", markdown))


def md_text(text: str) -> str:
    """Data as Markdown text that formats nothing: one line (control and invisible
    characters shown as escapes, no spaces at its ends), every inline marker
    escaped, and a start that could open a block escaped too."""
    return _block_safe(_inline(visible(text).strip()))


def md_code(text: str) -> str:
    """A name as a Markdown code span: shown as typed on one line (control and
    invisible characters as escapes), fenced with more backticks than it holds in a
    row, padded when it starts or ends with a backtick or with spaces on both sides
    (CommonMark strips one space from each side then)."""
    shown = visible(text)
    if not shown:
        return '`""`'
    fence = "`" * (max((len(run) for run in re.findall(r"`+", shown)), default=0) + 1)
    pad = shown[0] == "`" or shown[-1] == "`" or (shown[0] == " " and shown[-1] == " ")
    inner = f" {shown} " if pad else shown
    return f"{fence}{inner}{fence}"


def _spans(parts: Sequence[str]) -> str:
    """Text and code spans alternating (`parts[1::2]` the spans' contents) as one
    line of Markdown."""
    out = [md_code(part) if i % 2 else _inline(part) for i, part in enumerate(parts)]
    return _block_safe("".join(out).strip())


def md_sentence(text: str) -> str:
    """One of our sentences with names in backticks (a finding's evidence and fix, a
    MISSING_DATA sentence): each backtick pair a code span, the rest text. With an
    odd number of backticks the pairs are unknown: all of it is text."""
    parts = visible(text).split("`")
    return md_text(text) if len(parts) % 2 == 0 else _spans(parts)


_ENTITIES = {"&amp;": "&", "&lt;": "<", "&gt;": ">"}


def _unescape_mrkdwn(text: str) -> str:
    return re.sub(r"&(?:amp|lt|gt);", lambda m: _ENTITIES[m[0]], text)


def _from_mrkdwn(text: str) -> str:
    """A sentence of `service.alerts.wording` (Slack mrkdwn) as Markdown: its code
    spans stay code spans, the rest is text; Slack's `&amp;` `&lt;` `&gt;` are the
    characters again, escaped as Markdown escapes them. `mrkdwn.code` and
    `mrkdwn.plain` leave no backtick in data, so the backticks pair exactly (should
    they not, all of it is text)."""
    parts = [_unescape_mrkdwn(part) for part in text.split("`")]
    return md_text("`".join(parts)) if len(parts) % 2 == 0 else _spans(parts)
