import pytest

from service.ingest.timestamps import check_not_future, parse_ts, parse_ts_text

SECOND = 1_700_000_000
EXPECTED_US = SECOND * 1_000_000


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (SECOND, EXPECTED_US),
        (SECOND + 0.25, EXPECTED_US + 250_000),
        (SECOND * 1000, EXPECTED_US),  # milliseconds (> 1e11)
        (SECOND * 1_000_000, EXPECTED_US),  # microseconds (> 1e14)
        (SECOND * 1_000_000_000, EXPECTED_US),  # nanoseconds (> 1e17)
        (100_000_000_001, 100_000_000_001_000),  # just above 1e11: milliseconds
        (0, 0),
        ("2023-11-14T22:13:20Z", EXPECTED_US),
        ("2023-11-14T22:13:20z", EXPECTED_US),
        ("2023-11-14T22:13:20", EXPECTED_US),  # no offset: UTC
        ("2023-11-14T23:13:20+01:00", EXPECTED_US),
        ("2023-11-14T22:13:20.123456Z", EXPECTED_US + 123_456),
        ("2023-11-14 22:13:20Z", EXPECTED_US),
        ("2023-11-14t22:13:20.123456789Z", EXPECTED_US + 123_456),  # ns truncated
        ("1970-01-01T00:00:00Z", 0),
        ("1970-01-01T00:00:00+01:00", -3600 * 1_000_000),  # the year as written
        ("2099-12-31T23:59:59-14:00", 4_102_495_199 * 1_000_000),
        (4_102_444_799, 4_102_444_799 * 1_000_000),  # the last second before 2100
        (4_102_444_800_000 - 1, 4_102_444_799_999_000),
        (4_102_444_800 * 10**9 - 1, 4_102_444_799_999_999),
    ],
)
def test_every_ts_form(value: float | str, expected: int) -> None:
    assert parse_ts(value) == expected


@pytest.mark.parametrize(
    "value", [None, True, [], "not a date", "", -5, float("nan"), "2023", 1e100, 10**30]
)
def test_bad_ts(value: object) -> None:
    with pytest.raises(ValueError):
        parse_ts(value)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("0001-01-01T00:00:00Z", "year must be from 1970 to 2099"),
        ("0001-01-01T00:00:00+14:00", "year must be from 1970 to 2099"),
        ("9999-12-31T23:59:59-14:00", "year must be from 1970 to 2099"),
        ("1969-12-31T23:59:59Z", "year must be from 1970 to 2099"),
        ("2100-01-01T00:00:00Z", "year must be from 1970 to 2099"),
        ("2026-01-01", "not an RFC 3339 timestamp"),
        ("20260101T000000Z", "not an RFC 3339 timestamp"),
        ("2026-01-01T00:00:00\x00", "not an RFC 3339 timestamp"),
        (" 2026-01-01T00:00:00Z", "not an RFC 3339 timestamp"),
        ("2026-01-01T00:00Z", "not an RFC 3339 timestamp"),
        ("2026-01-01T00:00:00.1234567890Z", "not an RFC 3339 timestamp"),
        ("2026-01-01T00:00:00+0100", "not an RFC 3339 timestamp"),
        ("2026-W01-1T00:00:00Z", "not an RFC 3339 timestamp"),
        ("2026-02-30T00:00:00Z", "day is out of range"),
        ("2026-01-01T24:00:00Z", "not a valid time"),
        ("2026-01-01T00:00:60Z", "leap second"),
        ("2026-01-01T00:00:00+24:00", "offset must be at most 23:59"),
        (4_102_444_800, "before 2100"),  # 2100-01-01 in seconds
        (100_000_000_000, "before 2100"),  # exactly 1e11 is still seconds: year 5138
        (4_102_444_800_000, "before 2100"),
        (2**64 - 1, "before 2100"),  # OTLP's largest time in ns
        (-1, "before 1970"),
    ],
)
def test_times_outside_the_accepted_range(value: object, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        parse_ts(value)


def test_a_record_from_the_future() -> None:
    now = EXPECTED_US
    check_not_future(now + 86_400 * 1_000_000, now)
    with pytest.raises(ValueError, match=r"1\.5 days after the server's clock.*1\.0 days"):
        check_not_future(now + 36 * 3600 * 1_000_000, now)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1700000000", EXPECTED_US),
        ("1700000000000", EXPECTED_US),
        ("1700000000.5", EXPECTED_US + 500_000),
        ("0", 0),
        ("2023-11-14T22:13:20Z", EXPECTED_US),
    ],
)
def test_ts_in_a_query_string(text: str, expected: int) -> None:
    assert parse_ts_text(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "1E100", "inf", "nan", "-1", "yesterday", "1e9", " 1700000000", "1_700_000_000", "0x10"],
)
def test_bad_ts_in_a_query_string(text: str) -> None:
    with pytest.raises(ValueError):
        parse_ts_text(text)
