"""Regular expressions (ECMA 262 and Python alike: ASCII classes, no look-around)
of exactly what the API accepts, for the OpenAPI schema. Each is built from the
constants that define the rule (the `ts` range of service.ingest.timestamps, the
bucket limits of the metrics service), never restating a number, so the schema
cannot drift from the server; tests/api/test_patterns.py checks each against the
parser that enforces it, both ways.

Why whole patterns and not `format: date-time`: JSON Schema's date-time admits
years 0000-9999 and only a `T`, and a pattern next to it would make a generator
(schemathesis draws date-time values from any year, then filters them through the
pattern) mostly miss; the server also takes a space. So the date is spelled out,
calendar included: each month's days, and 29 February only in leap years (every
fourth year, as within 1970-2099 the century rule never applies; the year list is
built by `calendar.isleap`, so it would be right for any range)."""

import calendar
from collections.abc import Iterable

from service.ingest.timestamps import EPOCH_NUMBER_RANGES, MAX_YEAR, MIN_YEAR

_DIGIT = "[0-9]"


def anchored(pattern: str) -> str:
    return f"^(?:{pattern})$"


def alternation(words: Iterable[str]) -> str:
    """A pattern matching exactly `words` (of regex-safe characters: digits, letters,
    `-`), factored by common prefixes so that 1440 numbers stay short."""
    trie: dict[str, dict] = {}  # type: ignore[type-arg]
    for word in sorted(set(words)):
        node = trie
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}
    return _trie_pattern(trie)


def _trie_pattern(node: dict[str, dict]) -> str:  # type: ignore[type-arg]
    """Branches that continue alike share a character class: 7[0-9]|8[0-9] is [78][0-9]."""
    by_rest: dict[str, list[str]] = {}
    for char, child in sorted(node.items()):
        if char:
            by_rest.setdefault(_trie_pattern(child), []).append(char)
    parts = [_char_class(chars) + rest for rest, chars in by_rest.items()]
    if not parts:
        return ""
    body = parts[0] if len(parts) == 1 else f"(?:{'|'.join(parts)})"
    return f"(?:{body})?" if "" in node else body


def _char_class(chars: list[str]) -> str:
    """One character, or a class of them, digit runs as ranges: [0-9], [13-57]."""
    if len(chars) == 1:
        return chars[0]
    runs: list[list[str]] = []
    for char in chars:
        if (
            runs
            and char.isdigit()
            and runs[-1][-1].isdigit()
            and ord(char) == ord(runs[-1][-1]) + 1
        ):
            runs[-1].append(char)
        else:
            runs.append([char])
    return (
        "["
        + "".join(run[0] + "-" + run[-1] if len(run) > 2 else "".join(run) for run in runs)
        + "]"
    )


def integer_range(low: int, high: int) -> str:
    """Decimal integers from `low` to `high` (inclusive, both >= 0), written without
    leading zeros."""
    if low > high:
        raise ValueError(f"empty range {low}..{high}")
    parts: list[str] = []
    for digits in range(len(str(low)), len(str(high)) + 1):
        first = max(low, 10 ** (digits - 1) if digits > 1 else 0)
        last = min(high, 10**digits - 1)
        if first <= last:
            parts.extend(_same_length_range(str(first), str(last)))
    return parts[0] if len(parts) == 1 else f"(?:{'|'.join(parts)})"


def _same_length_range(low: str, high: str) -> list[str]:
    """Patterns for the numbers low..high of one length, prefix by prefix."""
    if not low:
        return [""]
    if low == high:
        return [low]
    if low[0] == high[0]:
        return [low[0] + rest for rest in _same_length_range(low[1:], high[1:])]
    size = len(low) - 1
    parts: list[str] = []
    if low[1:] == "0" * size:
        start = int(low[0])
    else:
        parts += [low[0] + rest for rest in _same_length_range(low[1:], "9" * size)]
        start = int(low[0]) + 1
    end = int(high[0]) if high[1:] == "9" * size else int(high[0]) - 1
    if start <= end:
        head = str(start) if start == end else f"[{start}-{end}]"
        parts.append(head + (f"{_DIGIT}{{{size}}}" if size > 1 else _DIGIT if size else ""))
    if high[1:] != "9" * size:
        parts += [high[0] + rest for rest in _same_length_range("0" * size, high[1:])]
    return parts


# --- ts as RFC 3339 -------------------------------------------------------------------

_YEARS = range(MIN_YEAR, MAX_YEAR + 1)
_TWO = "0[1-9]|1[0-9]|2[0-8]"
_DAYS = {28: _TWO, 30: f"{_TWO}|29|30", 31: f"{_TWO}|29|30|31"}


def _month_days() -> str:
    """`MM-DD` of every day that every year has (29 February aside)."""
    by_length: dict[int, list[str]] = {}
    for month in range(1, 13):
        # The length of the month in a common year (1970 is one).
        by_length.setdefault(calendar.monthrange(1970, month)[1], []).append(f"{month:02d}")
    parts = [
        f"{alternation(months)}-(?:{_DAYS[length]})" for length, months in sorted(by_length.items())
    ]
    return "|".join(parts)


RFC3339_DATE = (
    f"{alternation(str(y) for y in _YEARS)}-(?:{_month_days()})"
    f"|{alternation(str(y) for y in _YEARS if calendar.isleap(y))}-02-29"
)
#: `T`, `t` or space; 00:00:00 to 23:59:59 (no leap second); 1-9 digits of fraction.
RFC3339_TIME = r"[Tt ](?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,9})?"
#: None (UTC), `Z`, `z` or an offset up to 23:59 either way.
RFC3339_OFFSET = "(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])?"
RFC3339 = f"(?:{RFC3339_DATE}){RFC3339_TIME}{RFC3339_OFFSET}"


# --- ts as an epoch number written in a query string -----------------------------------

_FRACTION = r"\.[0-9]{1,9}"
#: A fraction with a digit other than 0: what takes a number past an exclusive bound.
_NONZERO_FRACTION = r"\.(?:" + "|".join(f"{'0' * k}[1-9][0-9]{{0,{8 - k}}}" for k in range(9)) + ")"


def _epoch_interval(low: float, low_inclusive: bool, high: int) -> str:
    """Decimal numbers (up to 9 digits of fraction) in [low, high) or (low, high):
    the whole part decides, except at an exclusive `low` itself."""
    whole_low = int(low) if low_inclusive else int(low) + 1
    pattern = f"{integer_range(whole_low, high - 1)}(?:{_FRACTION})?"
    if not low_inclusive:
        pattern += f"|{int(low)}{_NONZERO_FRACTION}"
    return pattern


EPOCH_DECIMAL = "|".join(f"(?:{_epoch_interval(*interval)})" for interval in EPOCH_NUMBER_RANGES)
#: `from`/`to`: empty (no bound), RFC 3339, or an epoch number in decimal digits.
TS_TEXT = f"|{RFC3339}|{EPOCH_DECIMAL}"
