"""What a regression is about, in an alert's words: the whole `service/model`, one
group of it (`scenario `ticket-summary` of `assistant/m``), or a canary (`canary
deploy `v5.0.0` of `assistant/m` (10% of requests, beside `v4.9.0`)`).

Pure functions of the regression's JSON (contract sections 5 and 5a: `group`, and
`canary` for a group of `by` `deploy`). A `group` or `canary` in another shape is
read as far as it goes and never raises: an alert about a malformed regression is
still better than none. The mrkdwn results follow `service.alerts.mrkdwn` (names as
code spans, other data `plain`); the header's pieces are raw, for `message._header`."""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from service.alerts.mrkdwn import code, plain

#: The groups of contract section 5 and how a sentence names them.
GROUP_WORDS: dict[str, str] = {"scenario": "scenario", "tenant": "tenant", "deploy": "deploy"}


@dataclass(frozen=True)
class Group:
    by: str
    value: str


@dataclass(frozen=True)
class Canary:
    """A canary regression's comparison: the older tag, the newer tag's share of the
    (service, model)'s requests over the compared buckets, and how many buckets both
    served. Each is None when the regression's `canary` does not say it."""

    baseline: str | None
    share: float | None
    buckets: int | None


@dataclass(frozen=True)
class Piece:
    """A piece of a plain_text header: our words, or a name (`name`: cut to fit first)."""

    text: str
    name: bool = False


def name_of(regression: Mapping[str, Any]) -> str:
    """`service/model`, raw: `code` it for mrkdwn, `visible` for plain_text."""
    return f"{regression['service']}/{regression['model']}"


def group_of(regression: Mapping[str, Any]) -> Group | None:
    """The regression's `group`, None for the whole service (or no usable group)."""
    group = regression.get("group")
    if not isinstance(group, Mapping) or not group.get("by"):
        return None
    value = group.get("value")
    return Group(str(group["by"]), "" if value is None else str(value))


def canary_of(regression: Mapping[str, Any]) -> Canary | None:
    """The canary comparison of a deploy group's regression (contract section 5a):
    every deploy group is a canary, so one without a usable `canary` still is."""
    group = group_of(regression)
    if group is None or group.by != "deploy":
        return None
    canary = regression.get("canary")
    if not isinstance(canary, Mapping):
        return Canary(None, None, None)
    baseline = canary.get("baseline")
    return Canary(
        baseline=None if baseline in (None, "") else str(baseline),
        share=_number(canary.get("share")),
        buckets=_count(canary.get("buckets")),
    )


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def _count(value: object) -> int | None:
    number = _number(value)
    return None if number is None or number < 0 else int(number)


def share_pct(share: float) -> str:
    """`10%`; a share that rounds to 0% or 100% without being it says so (`<1%`,
    `>99%`): a canary on 0.3% of traffic is not on none of it."""
    if 0 < share < 0.005:
        return "<1%"
    if 0.995 <= share < 1:
        return ">99%"
    return f"{share:.0%}"


def _group_words(group: Group) -> str:
    return GROUP_WORDS.get(group.by) or plain(group.by)


def _traffic(canary: Canary) -> str:
    """mrkdwn: ``10% of requests, beside `v4.9.0` ``; '' when the regression says
    neither."""
    parts = []
    if canary.share is not None:
        parts.append(f"{share_pct(canary.share)} of requests")
    if canary.baseline is not None:
        parts.append(f"beside {code(canary.baseline)}")
    return ", ".join(parts)


def subject(regression: Mapping[str, Any], *, short: bool = False) -> str:
    """mrkdwn: `` `assistant/m` ``, ``scenario `ticket-summary` of `assistant/m` ``,
    ``canary deploy `v5` of `assistant/m` (10% of requests, beside `v4.9`)``;
    `short` leaves the canary's traffic out (where the message says it elsewhere)."""
    group, name = group_of(regression), code(name_of(regression))
    if group is None:
        return name
    canary = canary_of(regression)
    if canary is None:
        return f"{_group_words(group)} {code(group.value)} of {name}"
    traffic = "" if short else _traffic(canary)
    return f"canary deploy {code(group.value)} of {name}" + (f" ({traffic})" if traffic else "")


def header_pieces(regression: Mapping[str, Any], *, short: bool = False) -> Sequence[Piece]:
    """The header's subject as plain_text pieces: `assistant/m`, ``scenario
    `ticket-summary` of assistant/m``, ``Canary deploy `v5` of assistant/m (10% of
    requests, beside v4.9)`` (`short`: ``canary deploy `v5` of assistant/m``, inside
    a sentence). Where the header quotes a value, a backtick in any of its names
    shows as U+02CB, as in a code span, so none seems to close the quote."""
    group = group_of(regression)
    if group is None:
        return (Piece(name_of(regression), name=True),)
    value, name = _quotable(group.value), _quotable(name_of(regression))
    canary = canary_of(regression)
    if canary is None:
        # A kind outside the contract's is data like a name: on one line, cut first.
        words = GROUP_WORDS.get(group.by)
        kind = (Piece(f"{words} `"),) if words else (_quotable(group.by), Piece(" `"))
        return (*kind, value, Piece("` of "), name)
    pieces = [Piece("canary deploy `" if short else "Canary deploy `"), value, Piece("` of "), name]
    if short or (canary.share is None and canary.baseline is None):
        return tuple(pieces)
    share = f"{share_pct(canary.share)} of requests" if canary.share is not None else ""
    pieces.append(Piece(f" ({share}"))
    if canary.baseline is not None:
        pieces += [Piece(", beside " if share else "beside "), _quotable(canary.baseline)]
    return (*pieces, Piece(")"))


def _quotable(name: str) -> Piece:
    return Piece(name.replace("`", "\u02cb"), name=True)


def canary_sentence(regression: Mapping[str, Any]) -> str | None:
    """What a canary alert adds (mrkdwn): how much traffic the new tag carries, and
    that it has not reached the rest yet, so rolling it back now spares it; None for
    any other regression."""
    canary, group = canary_of(regression), group_of(regression)
    if canary is None or group is None:
        return None
    tag = code(group.value)
    said = f"Deploy {tag} " + (
        f"served {share_pct(canary.share)} of the requests"
        if canary.share is not None
        else "is a canary"
    )
    if canary.baseline is not None:
        said += f" beside {code(canary.baseline)}"
    if canary.buckets:
        said += f" over the {canary.buckets} detection bucket{'s' * (canary.buckets != 1)} compared"
    if regression.get("status") == "resolved":
        return f"{said}: the drop was caught on the canary, before a full rollout."
    return (
        f"{said}: the release has not reached all traffic yet. "
        "Roll it back before the full rollout."
    )


def group_text(regression: Mapping[str, Any]) -> str:
    """Raw text for a terminal (`cachewatch detect`): '' for the whole service,
    `scenario ticket-summary`, `canary deploy v5.0.0 (10% of requests, beside v4.9.0,
    12 buckets)`. The caller makes it `visible`."""
    group = group_of(regression)
    if group is None:
        return ""
    canary = canary_of(regression)
    if canary is None:
        return f"{group.by} {group.value}"
    said = [f"{share_pct(canary.share)} of requests"] if canary.share is not None else []
    said += [f"beside {canary.baseline}"] if canary.baseline is not None else []
    if canary.buckets is not None:
        said.append(f"{canary.buckets} bucket{'s' * (canary.buckets != 1)}")
    return f"canary deploy {group.value}" + (f" ({', '.join(said)})" if said else "")
