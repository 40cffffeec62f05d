"""The contract's `ts` forms, normalized to integer microseconds since the epoch, and
the range of times cachewatch accepts (docs/ingestion.md, "Times").

Accepted, for records, events and the `from`/`to` of every read:

- an RFC 3339 string, `2026-11-30T14:05:00Z`: a `T`, `t` or space between date and
  time, 1 to 9 digits of fraction, an offset `Z`, `z` or `+hh:mm`/`-hh:mm` (none
  means UTC), and a year from MIN_YEAR to MAX_YEAR *as written* (the offset cannot
  move a time out of the range, so a pattern on the text says exactly what is
  accepted). Nothing else: no date alone, no ISO 8601 basic form, no whitespace;
- an epoch number, its unit read from its magnitude as the contract says (seconds,
  above 1e11 milliseconds, above 1e14 microseconds, above 1e17 nanoseconds), from
  the epoch up to (not including) END_S, in its unit: EPOCH_NUMBER_RANGES.

Why a range at all: every later step (rollup buckets, chart days, the dashboard's
previous range, RFC 3339 output) must work for every stored time, and a time
before 1970 or after 2099 is a unit or clock mistake, not an LLM request. A usage
record is also refused when it starts more than MAX_FUTURE_S after the server
received it (`check_not_future`): the dashboard anchors its default view at the
newest data, and one record from the future would empty it."""

import math
import re
from datetime import UTC, datetime
from decimal import Decimal

from service.rfc3339 import us_to_rfc3339

_US_PER_S = 1_000_000
#: How far after the server's clock a usage record may start: a day covers clock
#: skew and local times sent without their offset (read as UTC) in every zone.
MAX_FUTURE_S = 86_400
MAX_FUTURE_US = MAX_FUTURE_S * _US_PER_S
MIN_YEAR = 1970
MAX_YEAR = 2099
#: 2100-01-01T00:00:00Z: epoch numbers must be before it.
END_S = 4_102_444_800
END_US = END_S * _US_PER_S

#: The epoch numbers accepted, one interval per unit: (low, low_inclusive, high),
#: high exclusive. Seconds from 0 (inclusive); milliseconds, microseconds and
#: nanoseconds from the contract's bound of their magnitude (exclusive), each up to
#: END_S in its unit. The OpenAPI schema is built from these.
#: The contract's magnitudes: an epoch number above these is in ms, us, ns.
MS_ABOVE, US_ABOVE, NS_ABOVE = 1e11, 1e14, 1e17
_END_MS, _END_NS = END_S * 1000, END_S * 1_000_000_000
EPOCH_NUMBER_RANGES: tuple[tuple[float, bool, int], ...] = (
    (0, True, END_S),
    (MS_ABOVE, False, _END_MS),
    (US_ABOVE, False, END_US),
    (NS_ABOVE, False, _END_NS),
)

# ASCII digits only: `\d` also matches other scripts' digits ("٢٠٢٦"), which int() reads.
# No groups: `_rfc3339_to_us` reads the fixed layout by position (groups cost time).
_RFC3339 = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]{1,9})?"
    r"(?:[Zz]|[+-][0-9]{2}:[0-9]{2})?"
)
_YEARS = (f"{MIN_YEAR:04d}", f"{MAX_YEAR:04d}")
#: An epoch number written in a query string (`from`, `to`): plain decimal digits,
#: without leading zeros (0 itself aside), up to 9 of fraction.
_DECIMAL = re.compile(r"(?:0|[1-9][0-9]{0,19})(?:\.[0-9]{1,9})?")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_ts(value: object) -> int:
    """RFC 3339 string (no offset means UTC) or epoch number -> epoch microseconds.
    ValueError says why not."""
    if isinstance(value, bool):
        raise ValueError("ts must be an RFC 3339 string or a number, not a boolean")
    if isinstance(value, int | float):
        return _epoch_number_to_us(value)
    if isinstance(value, str):
        return _rfc3339_to_us(value)
    raise ValueError("ts must be an RFC 3339 string or a number")


def parse_ts_text(text: str) -> int:
    """A `ts` written in a query string (`from`, `to`): an epoch number in decimal
    digits (any of its magnitudes), or RFC 3339. ValueError says why not.

    The text's exact value decides whether it is in EPOCH_NUMBER_RANGES, as the
    OpenAPI pattern built from them says: a float would round 4102444799.999999999
    up to the excluded 2100 and 100000000000.000000001 down to the excluded 1e11."""
    if _DECIMAL.fullmatch(text) is None:
        if text and text.strip("0123456789.") == "":
            raise ValueError(
                f"ts {text[:64]!r}: an epoch number is written in decimal digits without "
                "leading zeros, with at most 9 after the point"
            )
        return parse_ts(text)
    if "." not in text:  # "1714564800" stays an exact int, not a float
        return parse_ts(int(text))
    return parse_ts(_float_within_its_range(text))


def _float_within_its_range(text: str) -> float:
    """The float of a decimal text, kept inside the epoch range its exact value is in
    (where rounding carried it onto an excluded end); out of every range, as is."""
    number, exact = float(text), Decimal(text)
    for low, low_inclusive, high in EPOCH_NUMBER_RANGES:
        if (exact >= low if low_inclusive else exact > low) and exact < high:
            floor = low if low_inclusive else math.nextafter(low, math.inf)
            return min(max(number, floor), math.nextafter(high, -math.inf))
    return number


def check_not_future(ts_us: int, received_us: int) -> None:
    """A usage record may start at most MAX_FUTURE_S after it was received."""
    if ts_us - received_us > MAX_FUTURE_US:
        raise ValueError(
            f"ts {us_to_rfc3339(ts_us)} is {_span((ts_us - received_us) / _US_PER_S)} "
            f"after the server's clock (at most {_span(MAX_FUTURE_S)} ahead is accepted; "
            "a time without an offset is UTC)"
        )


def _span(seconds: float) -> str:
    if seconds >= 86_400:
        return f"{seconds / 86_400:.1f} days"
    return f"{seconds / 3600:.1f} h"


def _epoch_number_to_us(value: float) -> int:
    if not math.isfinite(value):
        raise ValueError("ts must be a finite number")
    if value < 0:
        raise ValueError("ts must not be before 1970")
    # EPOCH_NUMBER_RANGES, scaled by magnitude. A plain if-chain: this runs once per
    # record and a generator cost 3x as much.
    if value > NS_ABOVE:
        factor, divisor, end = 1, 1000, _END_NS
    elif value > US_ABOVE:
        factor, divisor, end = 1, 1, END_US
    elif value > MS_ABOVE:
        factor, divisor, end = 1000, 1, _END_MS
    else:
        factor, divisor, end = _US_PER_S, 1, END_S
    if value >= end:
        raise ValueError(
            "ts must be before 2100 (an epoch number in seconds, or above 1e11 "
            "milliseconds, 1e14 microseconds, 1e17 nanoseconds)"
        )
    if isinstance(value, int):
        return value * factor // divisor
    return round(value * factor / divisor)


def _rfc3339_to_us(text: str) -> int:
    """The pattern decides the syntax; `datetime.fromisoformat` (C, accepting a
    superset of it) the calendar and the instant. Its fixed layout puts the year at
    0-3, the seconds at 17-18 and an offset's sign 6 from the end."""
    if len(text) > 40 or _RFC3339.fullmatch(text) is None:
        raise ValueError(
            f"ts {text[:64]!r} is not an RFC 3339 timestamp (like 2026-11-30T14:05:00Z)"
        )
    if not _YEARS[0] <= text[:4] <= _YEARS[1]:  # four ASCII digits compare as numbers
        raise ValueError(f"ts {text!r}: the year must be from {MIN_YEAR} to {MAX_YEAR}")
    if text[17:19] == "60":
        raise ValueError(f"ts {text!r}: a leap second (:60) is not accepted")
    if text[-6] in "+-" and (int(text[-5:-3]) > 23 or int(text[-2:]) > 59):
        raise ValueError(f"ts {text!r}: the offset must be at most 23:59")
    try:
        # Python < 3.12 reads no `Z`; a fraction of more than 6 digits is truncated.
        moment = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1] in "Zz" else text)
    except ValueError as exc:
        raise ValueError(f"ts {text!r} is not a valid time: {exc}") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * _US_PER_S + delta.microseconds
