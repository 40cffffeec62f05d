"""The dashboard's view, as held in its URL: service, model, a group, a time range
and a bucket. Links from Slack alerts carry the same parameters, so they open the
same view.

A group (contract section 4b) is `group_by=` (`scenario`, `tenant` or `deploy`) and
`group_value=`, as the alerts' links give it (`service.alerts.links`): one group at
a time, since groups are kept per field and no series holds two at once. A field
without a value selects no group. `groups=` picks the field the groups table lists
(default: the selected field, else `scenario`).

`from`/`to` take the API's forms (RFC 3339 or an epoch number). Without them the
view is the `range` (default 7 days) ending at the newest data, not at the wall
clock, so a replayed or late trace is shown too (the page says how old the newest
data is). The range is widened to whole buckets: a partial first or last bucket
would read as a dip."""

import re
from dataclasses import dataclass

from service.ingest.timestamps import parse_ts_text
from service.rollups.chart import GROUP_BYS, Group

MINUTE_S = 60
HOUR_S = 3600
DAY_S = 86_400
US = 1_000_000
#: No trace carries more points than this (contract of issue 6).
MAX_POINTS = 2000
#: The automatic bucket keeps a chart readable at about this many points.
AUTO_POINTS = 360
#: Automatic buckets under an hour only for ranges up to this long.
FINE_SPAN_S = 6 * 3600
DEFAULT_RANGE_S = 7 * DAY_S
NICE_BUCKETS_S = (60, 300, 900, 1800, 3600, 3 * 3600, 6 * 3600, 12 * 3600, DAY_S)

_DURATION = re.compile(r"^(\d{1,6})\s*(s|m|min|h|d)?$")
_UNIT_S = {None: 1, "s": 1, "m": 60, "min": 60, "h": 3600, "d": DAY_S}


class FilterError(ValueError):
    """A parameter that cannot be understood; the message says which and why."""


def parse_duration(name: str, value: str) -> int:
    match = _DURATION.match(value.strip().lower())
    if match is None:
        raise FilterError(f"`{name}`: seconds, or a number with s, m, h or d (e.g. 5m, 24h)")
    return int(match.group(1)) * _UNIT_S[match.group(2)]


def parse_time(name: str, value: str) -> int:
    """RFC 3339 or an epoch number, as the API's `from`/`to`, so a link works on both."""
    try:
        return parse_ts_text(value)
    except ValueError as exc:
        raise FilterError(f"`{name}`: {exc}") from None


@dataclass(frozen=True)
class RawFilters:
    """The query string as given (empty strings mean absent)."""

    service: str = ""
    model: str = ""
    from_: str = ""
    to: str = ""
    bucket: str = ""
    range: str = ""
    group_by: str = ""
    group_value: str = ""
    groups: str = ""

    def query(self) -> dict[str, str]:
        """The non-empty parameters, for links that keep the view."""
        pairs = {
            "service": self.service,
            "model": self.model,
            "group_by": self.group_by,
            "group_value": self.group_value,
            "from": self.from_,
            "to": self.to,
            "bucket": self.bucket,
            "range": self.range,
            "groups": self.groups,
        }
        return {k: v for k, v in pairs.items() if v}


_FIELDS = ", ".join(f"`{b}`" for b in GROUP_BYS)


def parse_group(raw: RawFilters) -> Group | None:
    """The one group the view is filtered to (None: the whole scope)."""
    if raw.group_by and raw.group_by not in GROUP_BYS:
        raise FilterError(f"`group_by`: one of {_FIELDS} (one group at a time)")
    if raw.group_value and not raw.group_by:
        raise FilterError(f"`group_value` needs `group_by`, the field it is a value of: {_FIELDS}")
    return Group(raw.group_by, raw.group_value) if raw.group_value else None


def parse_groups_by(raw: RawFilters) -> str:
    """The field the groups table lists: `groups`, else the selector's field."""
    if raw.groups and raw.groups not in GROUP_BYS:
        raise FilterError(f"`groups`: one of {_FIELDS}")
    return raw.groups or raw.group_by or GROUP_BYS[0]


@dataclass(frozen=True)
class View:
    """The resolved view: what every panel shows."""

    service: str | None
    model: str | None
    from_us: int
    to_us: int
    bucket_s: int
    #: The bucket asked for when it was raised to keep <= MAX_POINTS points.
    bucket_raised_from_s: int | None
    #: Only this group's records in the headline and time series (None: all).
    group: Group | None = None
    #: The group field the groups table lists.
    groups_by: str = GROUP_BYS[0]

    @property
    def span_us(self) -> int:
        return self.to_us - self.from_us

    @property
    def previous(self) -> tuple[int, int]:
        """The range of equal length just before, for the headline comparisons."""
        return self.from_us - self.span_us, self.from_us


def auto_bucket(span_s: int, target_points: int = AUTO_POINTS) -> int:
    """The smallest nice bucket giving at most `target_points` points; beyond a day,
    whole days. Ranges over FINE_SPAN_S get hour multiples: those read the hourly
    rollups, 60x fewer rows than minute ones (a day of minute rows at a million
    requests a day is too slow to chart on every refresh; ask `bucket` explicitly
    for it)."""
    for bucket in NICE_BUCKETS_S:
        if span_s > FINE_SPAN_S and bucket < HOUR_S:
            continue
        if span_s / bucket <= target_points:
            return bucket
    days = -(-span_s // (target_points * DAY_S))
    return days * DAY_S


def resolve(raw: RawFilters, newest_us: int | None, now_us: int) -> View:
    """Turn the URL's parameters into a view. `newest_us` is the start of the newest
    data bucket (None without data): it anchors ranges given without `to`."""
    group = parse_group(raw)
    groups_by = parse_groups_by(raw)
    from_us = parse_time("from", raw.from_) if raw.from_ else None
    to_us = parse_time("to", raw.to) if raw.to else None
    range_s = parse_duration("range", raw.range) if raw.range else DEFAULT_RANGE_S
    if not MINUTE_S <= range_s <= 3660 * DAY_S:
        raise FilterError("`range`: from 1 minute to 10 years")
    if to_us is None:
        anchor = newest_us + MINUTE_S * US if newest_us is not None else now_us
        to_us = anchor if from_us is None else max(anchor, from_us + MINUTE_S * US)
    if from_us is None:
        from_us = to_us - range_s * US
    if to_us <= from_us:
        raise FilterError("`to` must be after `from`")
    span_s = -(-(to_us - from_us) // US)

    asked = parse_duration("bucket", raw.bucket) if raw.bucket else None
    if asked is not None and (asked < MINUTE_S or asked % MINUTE_S):
        raise FilterError("`bucket`: a whole number of minutes (e.g. 5m, 1h, 1d)")
    bucket_s = asked if asked is not None else auto_bucket(span_s)
    raised_from = None
    if span_s / bucket_s > MAX_POINTS:
        # Exact downsampling: a coarser bucket re-sums the rollups, so ratios stay
        # exact (thinning the points out would drop the very dips we look for).
        raised_from, bucket_s = bucket_s, auto_bucket(span_s, MAX_POINTS)
    bucket_us = bucket_s * US
    # Whole buckets only (buckets are aligned to the epoch, as in /v1/metrics).
    from_us = (from_us // bucket_us) * bucket_us
    to_us = -(-to_us // bucket_us) * bucket_us
    return View(
        service=raw.service or None,
        model=raw.model or None,
        from_us=from_us,
        to_us=to_us,
        bucket_s=bucket_s,
        bucket_raised_from_s=raised_from if raised_from != bucket_s else None,
        group=group,
        groups_by=groups_by,
    )


def format_duration(seconds: int) -> str:
    for unit, size in (("d", DAY_S), ("h", HOUR_S), ("m", MINUTE_S)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
