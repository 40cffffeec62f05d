import pytest

from service.ingest.timestamps import parse_ts, parse_ts_text, us_to_rfc3339

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
        (100_000_000_000, 100_000_000_000_000_000),  # exactly 1e11 is still seconds
        (0, 0),
        ("2023-11-14T22:13:20Z", EXPECTED_US),
        ("2023-11-14T22:13:20z", EXPECTED_US),
        ("2023-11-14T22:13:20", EXPECTED_US),  # no offset: UTC
        ("2023-11-14T23:13:20+01:00", EXPECTED_US),
        ("2023-11-14T22:13:20.123456Z", EXPECTED_US + 123_456),
        ("2023-11-14 22:13:20Z", EXPECTED_US),
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


def test_rfc3339_output() -> None:
    assert us_to_rfc3339(EXPECTED_US) == "2023-11-14T22:13:20Z"
    assert us_to_rfc3339(EXPECTED_US + 5) == "2023-11-14T22:13:20.000005Z"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1700000000", EXPECTED_US),
        ("1700000000000", EXPECTED_US),
        ("1700000000.5", EXPECTED_US + 500_000),
        ("2023-11-14T22:13:20Z", EXPECTED_US),
    ],
)
def test_ts_in_a_query_string(text: str, expected: int) -> None:
    assert parse_ts_text(text) == expected


@pytest.mark.parametrize("text", ["", "1E100", "inf", "nan", "-1", "yesterday"])
def test_bad_ts_in_a_query_string(text: str) -> None:
    with pytest.raises(ValueError):
        parse_ts_text(text)
