"""Slack messages for regressions, built with slack_sdk's Block Kit models so that
Slack's limits are checked here, before sending, not by a 400 from Slack.

Pure: a message is a function of the regressions' contract JSON (section 5) and the
public URL, nothing else (no clock, no database), so it can be golden-tested."""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from slack_sdk.errors import SlackObjectFormationError
from slack_sdk.models.blocks import (
    Block,
    ContextBlock,
    HeaderBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

from service.alerts.links import dashboard_url
from service.alerts.mrkdwn import clip, clip_mrkdwn, link, visible
from service.alerts.subject import Piece, canary_sentence, header_pieces, subject
from service.alerts.wording import (
    attribution_line,
    cause_label,
    cause_sentence,
    cost_line,
    cost_phrase,
    duration,
    evidence_line,
    parse_time,
    pct,
    when,
)

Kind = Literal["opened", "resolved"]

# Slack's limits (https://docs.slack.dev/reference/block-kit/blocks): slack_sdk checks
# the per-block ones on `to_dict`; the per-message ones are checked here.
MAX_BLOCKS = 50
MAX_TEXT = 40_000
HEADER_MAX = HeaderBlock.text_max_length
SECTION_MAX = SectionBlock.text_max_length
FIELD_MAX = 2_000
EVIDENCE_LINE_MAX = 300


@dataclass(frozen=True)
class AlertItem:
    """One alert owed: the regression (contract JSON) and whether it opened or resolved."""

    kind: Kind
    regression: Mapping[str, Any]


@dataclass(frozen=True)
class SlackMessage:
    text: str
    blocks: tuple[Block, ...]

    def payload(self) -> dict[str, Any]:
        """The webhook's JSON body; raises SlackObjectFormationError when Slack would
        refuse it (each block's `to_dict` runs slack_sdk's validators)."""
        if not 0 < len(self.blocks) <= MAX_BLOCKS:
            raise SlackObjectFormationError(f"a message holds 1 to {MAX_BLOCKS} blocks")
        if not 0 < len(self.text) <= MAX_TEXT:
            raise SlackObjectFormationError(f"text must hold 1 to {MAX_TEXT} characters")
        return {"text": self.text, "blocks": [block.to_dict() for block in self.blocks]}


def compose(items: Sequence[AlertItem], public_url: str) -> SlackMessage:
    """One message for the alerts due together: the full message for one regression,
    a digest for several. An `opened` and a `resolved` alert of the same regression
    in one batch make one entry (the opening message says it already resolved)."""
    entries = _entries(items)
    if not entries:
        raise ValueError("no alerts to compose")
    if len(entries) == 1:
        kind, regression = entries[0]
        if kind == "opened":
            return opened_message(regression, public_url)
        return resolved_message(regression, public_url)
    return digest_message(entries, public_url)


def _entries(items: Sequence[AlertItem]) -> list[tuple[Kind, Mapping[str, Any]]]:
    order: list[object] = []
    kinds: dict[object, set[Kind]] = {}
    regressions: dict[object, Mapping[str, Any]] = {}
    for item in items:
        key = item.regression["id"]
        if key not in kinds:
            order.append(key)
            kinds[key] = set()
        kinds[key].add(item.kind)
        regressions[key] = item.regression
    return [("opened" if "opened" in kinds[k] else "resolved", regressions[k]) for k in order]


def _drop(regression: Mapping[str, Any]) -> tuple[str, str]:
    return pct(regression["before"].get("hit_rate")), pct(regression["after"].get("hit_rate"))


def _mrkdwn(text: str, limit: int = SECTION_MAX) -> MarkdownTextObject:
    """verbatim: Slack links no URL, email or channel name and parses no mention
    that is not written as `<...>`; only our own links are links (mrkdwn.py)."""
    return MarkdownTextObject(text=clip_mrkdwn(text, limit), verbatim=True)


def _header(before: str, name: str = "", after: str = "") -> HeaderBlock:
    """`before` + the name + `after` as plain_text (`_header_of`)."""
    return _header_of((Piece(before), Piece(name, name=True), Piece(after)))


def _header_of(pieces: Sequence[Piece]) -> HeaderBlock:
    """The pieces as plain_text, which Slack does not parse (escapes of `&<>` would
    show): `visible` keeps each name on one line, `emoji=False` keeps shortcodes as
    text. Long names are cut, not our words between and after them: each name gets
    an equal share of the room the others leave."""
    names = [visible(p.text) for p in pieces if p.name]
    room = max(HEADER_MAX - sum(len(p.text) for p in pieces if not p.name), len(names))
    cut: dict[int, str] = {}
    for left, index in enumerate(sorted(range(len(names)), key=lambda i: len(names[i]))):
        cut[index] = clip(names[index], max(room // (len(names) - left), 1))
        room -= len(cut[index])
    shown = iter(cut[i] for i in range(len(names)))
    text = "".join(next(shown) if p.name else p.text for p in pieces)
    return HeaderBlock(text=PlainTextObject(text=clip(text, HEADER_MAX), emoji=False))


def _resolution(regression: Mapping[str, Any]) -> str | None:
    if regression.get("status") != "resolved":
        return None
    resolved_at = regression.get("resolved_at")
    if not resolved_at:
        return "recovered since"
    took = (parse_time(str(resolved_at)) - parse_time(str(regression["change_ts"]))).total_seconds()
    return f"recovered at {when(str(resolved_at))}, after {duration(took)}"


def opened_message(regression: Mapping[str, Any], public_url: str) -> SlackMessage:
    before, after = _drop(regression)
    url = dashboard_url(public_url, regression)
    since = when(str(regression["change_ts"]))
    change = f"*Since* {since}\n*Change:* {attribution_line(regression)}"
    canary = canary_sentence(regression)
    if canary:
        change += f"\n*Canary:* {canary}"
    cost = cost_line(regression)
    if cost:
        change += f"\n*Cost:* the drop {cost}"
    resolution = _resolution(regression)
    if resolution:
        change += f"\n*Already resolved:* {resolution}"
    blocks: list[Block] = [
        _header_of((*header_pieces(regression), Piece(f": hit rate {before} → {after}"))),
        SectionBlock(text=_mrkdwn(change)),
        SectionBlock(
            text=_mrkdwn(f"*Likely cause: {cause_label(regression)}*\n{cause_sentence(regression)}")
        ),
        SectionBlock(fields=_metric_fields(regression)),
    ]
    evidence = _evidence(regression.get("evidence") or [])
    if evidence:
        blocks.append(SectionBlock(text=_mrkdwn(evidence)))
    blocks.append(
        SectionBlock(
            text=_mrkdwn(
                f"{link(url, 'Open the dashboard')} on {subject(regression, short=True)}, "
                "3 hours either side of the change"
            )
        )
    )
    blocks.append(_footer(regression))
    phrase = cost_phrase(regression)
    text = (
        f"Cache regression: {subject(regression)} hit rate {before} → {after} since {since}; "
        f"likely cause: {cause_label(regression)}"
        + (f"; it {phrase}" if phrase else "")
        + f". {link(url, 'Dashboard')}"
    )
    return SlackMessage(text=text, blocks=tuple(blocks))


def resolved_message(regression: Mapping[str, Any], public_url: str) -> SlackMessage:
    """Shorter: the team already has the details from the opening message."""
    before, after = _drop(regression)
    url = dashboard_url(public_url, regression)
    summary = (
        f"The drop from {before} to {after} that began {when(str(regression['change_ts']))} "
        f"({cause_label(regression)}) {_resolution(regression) or 'recovered'}."
    )
    blocks: list[Block] = [
        _header_of(
            (
                Piece("Resolved: "),
                *header_pieces(regression, short=True),
                Piece(" hit rate recovered"),
            )
        ),
        SectionBlock(text=_mrkdwn(f"{summary} {link(url, 'Open the dashboard')}")),
        _footer(regression),
    ]
    text = f"Resolved: {subject(regression, short=True)}. {summary}"
    return SlackMessage(text=text, blocks=tuple(blocks))


def digest_message(
    entries: Sequence[tuple[Kind, Mapping[str, Any]]], public_url: str
) -> SlackMessage:
    """Several regressions in one message: one section each, the details a click away."""
    opened = [r for kind, r in entries if kind == "opened"]
    resolved = [r for kind, r in entries if kind == "resolved"]
    counts = [
        *([f"{len(opened)} cache regression{'s' * (len(opened) != 1)}"] if opened else []),
        *([f"{len(resolved)} resolved"] if resolved else []),
    ]
    title = "cachewatch: " + ", ".join(counts)
    # Header and footer take two blocks; the rest are entries, and an overflow line.
    room = MAX_BLOCKS - 2
    shown = list(entries) if len(entries) <= room else list(entries[: room - 1])
    blocks: list[Block] = [_header(title)]
    blocks += [SectionBlock(text=_mrkdwn(_digest_entry(k, r, public_url))) for k, r in shown]
    if len(shown) < len(entries):
        blocks.append(SectionBlock(text=_mrkdwn(f"…and {len(entries) - len(shown)} more.")))
    ids = ", ".join(f"#{r['id']}" for _, r in entries)
    blocks.append(ContextBlock(elements=[_mrkdwn(f"cachewatch · regressions {ids}", FIELD_MAX)]))
    names = ", ".join(dict.fromkeys(subject(r, short=True) for _, r in entries))
    return SlackMessage(text=clip_mrkdwn(f"{title}: {names}", MAX_TEXT), blocks=tuple(blocks))


def _digest_entry(kind: Kind, regression: Mapping[str, Any], public_url: str) -> str:
    before, after = _drop(regression)
    name = subject(regression, short=True)
    dashboard = link(dashboard_url(public_url, regression), "Dashboard")
    since = when(str(regression["change_ts"]))
    if kind == "resolved":
        return (
            f"*Resolved* {name}: the drop from {before} to {after} since {since} "
            f"{_resolution(regression) or 'recovered'}. {dashboard}"
        )
    resolution, phrase = _resolution(regression), cost_phrase(regression)
    canary = canary_sentence(regression)
    return (
        f"*Regression* {name}: hit rate {before} → {after} since {since}"
        + (f" ({resolution})" if resolution else "")
        + (f"\n*Canary:* {canary}" if canary else "")
        + (f"\n*Cost:* the drop {phrase}" if phrase else "")
        + f"\n*Cause:* {cause_sentence(regression)}"
        + f"\n*Change:* {attribution_line(regression)}\n{dashboard}"
    )


_METRICS = (
    ("hit_rate", "Hit rate"),
    ("cacheable_fraction", "Cacheable fraction"),
    ("rewarm_share", "Rewarm share"),
    ("unique_prefix_ratio", "Unique prefixes"),
)


def _metric_fields(regression: Mapping[str, Any]) -> list[MarkdownTextObject]:
    before, after = regression["before"], regression["after"]
    return [
        _mrkdwn(f"*{label}*\n{pct(before.get(key))} → {pct(after.get(key))}", FIELD_MAX)
        for key, label in _METRICS
    ]


def _evidence(lines: Sequence[object]) -> str:
    """`*Evidence*` and one bullet a line, as many whole lines as fit in a section."""
    text = "*Evidence*"
    for count, line in enumerate(lines):
        bullet = "\n• " + evidence_line(clip(str(line), EVIDENCE_LINE_MAX))
        if len(text) + len(bullet) > SECTION_MAX - 40:
            return text + f"\n…and {len(lines) - count} more"
        text += bullet
    return "" if text == "*Evidence*" else text


def _footer(regression: Mapping[str, Any]) -> ContextBlock:
    detected = regression.get("detected_at")
    detected_text = f" · detected {when(str(detected))}" if detected else ""
    return ContextBlock(
        elements=[_mrkdwn(f"cachewatch · regression #{regression['id']}{detected_text}", FIELD_MAX)]
    )


def webhook_test_message(public_url: str) -> SlackMessage:
    """`cachewatch alerts test`: proves the webhook works and where links will point."""
    text = (
        "This is a test message from cachewatch: regression alerts will arrive in this "
        f"channel, linking to {link(public_url, public_url)}."
    )
    return SlackMessage(
        text=text,
        blocks=(_header("cachewatch test message"), SectionBlock(text=_mrkdwn(text))),
    )
