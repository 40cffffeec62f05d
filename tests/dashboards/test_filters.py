"""The URL's filters -> the view every panel shows."""

import pytest

from dashboards.filters import (
    DAY_S,
    HOUR_S,
    MAX_POINTS,
    US,
    FilterError,
    RawFilters,
    auto_bucket,
    format_duration,
    resolve,
)

NEWEST = 1_767_225_600 * US + 10 * DAY_S * US + 13 * HOUR_S * US + 17 * 60 * US  # 13:17


def test_default_is_seven_days_ending_at_the_newest_data_in_hours() -> None:
    view = resolve(RawFilters(), NEWEST, now_us=0)
    assert view.bucket_s == HOUR_S
    assert view.to_us % (HOUR_S * US) == 0 and view.to_us > NEWEST
    assert view.span_us == 7 * DAY_S * US + HOUR_S * US  # widened to whole buckets
    assert view.previous == (view.from_us - view.span_us, view.from_us)


def test_without_data_the_range_ends_now() -> None:
    view = resolve(RawFilters(range="1h"), None, now_us=NEWEST)
    assert view.from_us <= NEWEST - HOUR_S * US and view.to_us >= NEWEST
    assert view.bucket_s == 60


@pytest.mark.parametrize(
    ("span_s", "bucket_s"),
    [(HOUR_S, 60), (6 * HOUR_S, 60), (24 * HOUR_S, HOUR_S), (7 * DAY_S, HOUR_S)],
)
def test_auto_bucket(span_s: int, bucket_s: int) -> None:
    assert auto_bucket(span_s) == bucket_s


def test_auto_bucket_for_long_ranges_stays_under_the_point_limit() -> None:
    assert 30 * DAY_S / auto_bucket(30 * DAY_S) <= 360
    assert 20 * 365 * DAY_S / auto_bucket(20 * 365 * DAY_S) <= 360


def test_explicit_range_and_bucket() -> None:
    raw = RawFilters(
        service="a", model="m", from_="2026-01-01T10:03:00Z", to="2026-01-01T12:00:00Z", bucket="5m"
    )
    view = resolve(raw, NEWEST, now_us=0)
    assert (view.service, view.model, view.bucket_s) == ("a", "m", 300)
    assert view.from_us == 1_767_261_600 * US  # 10:00: widened to the bucket
    assert view.bucket_raised_from_s is None


def test_a_bucket_giving_too_many_points_is_raised() -> None:
    view = resolve(RawFilters(range="30d", bucket="1m"), NEWEST, now_us=0)
    assert view.bucket_raised_from_s == 60
    assert view.span_us / (view.bucket_s * US) <= MAX_POINTS
    assert view.bucket_s % HOUR_S == 0  # a month reads hourly rows


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (RawFilters(bucket="5 parsecs"), "bucket"),
        (RawFilters(bucket="90s"), "bucket"),
        (RawFilters(range="x"), "range"),
        (RawFilters(from_="yesterday"), "from"),
        (RawFilters(from_="2026-01-02T00:00:00Z", to="2026-01-01T00:00:00Z"), "after"),
    ],
)
def test_bad_parameters_say_which(raw: RawFilters, message: str) -> None:
    with pytest.raises(FilterError, match=message):
        resolve(raw, NEWEST, now_us=0)


def test_query_keeps_only_given_parameters() -> None:
    assert RawFilters(service="a b", range="24h").query() == {"service": "a b", "range": "24h"}
    assert format_duration(300) == "5m" and format_duration(DAY_S) == "1d"
