"""Time in microseconds: every timestamp is stored and computed as integer µs since
the epoch, and these are its units."""

SECOND_US = 1_000_000
MINUTE_US = 60 * SECOND_US
HOUR_US = 60 * MINUTE_US
DAY_US = 24 * HOUR_US
