"""Fast RFC 3339 formatting of simulated times (the per-request loop formats
hundreds of thousands of timestamps; datetime objects would dominate it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

_US_PER_DAY = 86_400_000_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class TsFormatter:
    """Seconds since `start` -> 'YYYY-MM-DDTHH:MM:SS.ffffffZ' (UTC, microseconds)."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            start = start.replace(tzinfo=UTC)
        self.start_us = (start - _EPOCH) // timedelta(microseconds=1)
        self._days: dict[int, str] = {}

    def epoch_us(self, t: float) -> int:
        return self.start_us + round(t * 1_000_000)

    def __call__(self, t: float) -> str:
        return self.format_us(self.epoch_us(t))

    def format_us(self, us: int) -> str:
        day, rem = divmod(us, _US_PER_DAY)
        prefix = self._days.get(day)
        if prefix is None:
            prefix = (_EPOCH + timedelta(days=day)).strftime("%Y-%m-%dT")
            self._days[day] = prefix
        secs, frac = divmod(rem, 1_000_000)
        hours, secs = divmod(secs, 3600)
        minutes, secs = divmod(secs, 60)
        return f"{prefix}{hours:02d}:{minutes:02d}:{secs:02d}.{frac:06d}Z"
