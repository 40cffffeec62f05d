"""The contract's `ts` forms, normalized to integer microseconds since the epoch."""

import math
from datetime import UTC, datetime

_US_PER_S = 1_000_000
# 9999-12-31T23:59:59.999999Z, the last moment RFC 3339 (and Python's datetime) can
# write; a larger number is a unit mistake, and it would overflow the 64-bit column.
_MAX_US = 253_402_300_799_999_999


def parse_ts(value: object) -> int:
    """RFC 3339 string (no offset means UTC) or epoch number -> epoch microseconds."""
    if isinstance(value, bool):
        raise ValueError("ts must be an RFC 3339 string or a number, not a boolean")
    if isinstance(value, int | float):
        return _epoch_number_to_us(value)
    if isinstance(value, str):
        return _rfc3339_to_us(value)
    raise ValueError("ts must be an RFC 3339 string or a number")


def parse_ts_text(text: str) -> int:
    """A `ts` written in a query string (`from`, `to`): an epoch number in any of
    its magnitudes, or RFC 3339. ValueError says why not."""
    try:
        number = float(text)
    except ValueError:
        return parse_ts(text)
    if number.is_integer():  # "1714564800" stays an exact int, not a float
        return parse_ts(int(number))
    return parse_ts(number)


def _epoch_number_to_us(value: float) -> int:
    if not math.isfinite(value):
        raise ValueError("ts must be a finite number")
    if value < 0:
        raise ValueError("ts must not be before 1970")
    # Scaled by magnitude: above 1e17 is ns, 1e14 us, 1e11 ms, else s. A plain
    # if-chain: this runs once per record and a generator cost 3x as much.
    if value > 1e17:
        factor, divisor = 1, 1000
    elif value > 1e14:
        factor, divisor = 1, 1
    elif value > 1e11:
        factor, divisor = 1000, 1
    else:
        factor, divisor = _US_PER_S, 1
    ts_us = value * factor // divisor if isinstance(value, int) else round(value * factor / divisor)
    if ts_us > _MAX_US:
        raise ValueError("ts must not be after the year 9999")
    return ts_us


def _rfc3339_to_us(text: str) -> int:
    if not 10 <= len(text) <= 64:
        raise ValueError("ts is not an RFC 3339 timestamp")
    normalized = text.strip()
    # Python < 3.12 rejects a lowercase 'z' and the ' ' separator is RFC 3339-legal.
    if normalized[-1:] in "zZ":
        normalized = normalized[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(normalized)
    except ValueError:
        raise ValueError(f"ts {text[:64]!r} is not an RFC 3339 timestamp") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    delta = parsed - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * _US_PER_S + delta.microseconds


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def us_to_rfc3339(ts_us: int) -> str:
    """Epoch microseconds -> RFC 3339 in UTC with a `Z`, as every answer gives times."""
    seconds, micros = divmod(ts_us, _US_PER_S)
    moment = datetime.fromtimestamp(seconds, UTC).replace(microsecond=micros)
    return moment.isoformat().replace("+00:00", "Z")
