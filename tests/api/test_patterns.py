"""The schema's patterns against the parsers that enforce them, both ways: every
string a pattern admits is accepted, and every string it refuses is refused.
Hypothesis draws from the pattern itself (what schemathesis sends as valid data)
and from a looser grammar around it (near misses: wrong days, leap years, bounds
of each epoch unit, odd digits), and some cases are spelled out."""

import calendar
import re
from collections.abc import Callable
from datetime import date, timedelta

import pytest
from fastapi import HTTPException
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from service.api.patterns import RFC3339, alternation, anchored, integer_range
from service.api.routers.metrics import _bucket_pattern, _sizes_pattern, parse_bucket, parse_sizes
from service.api.schemas import CONTENT_ENCODING_PATTERN, TS_TEXT_PATTERN
from service.ingest.body import UndecodableBody, decompress
from service.ingest.timestamps import (
    EPOCH_NUMBER_RANGES,
    MAX_YEAR,
    MIN_YEAR,
    parse_ts,
    parse_ts_text,
)

RFC3339_RE = re.compile(anchored(RFC3339))
TS_TEXT_RE = re.compile(TS_TEXT_PATTERN)


def accepted(parse: Callable[[str], object], text: str) -> bool:
    """Whether the parser takes `text`: the time parsers refuse with ValueError, the
    routes' parsers with a 422."""
    try:
        parse(text)
    except (ValueError, HTTPException):
        return False
    return True


def agree(pattern: re.Pattern[str], parse: Callable[[str], object], text: str) -> None:
    assert bool(pattern.fullmatch(text)) == accepted(parse, text), text


# --- builders ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("low", "high"), [(0, 0), (0, 9), (7, 1234), (60, 86_400), (10**11 + 1, 4 * 10**12)]
)
def test_integer_range_is_exact(low: int, high: int) -> None:
    pattern = re.compile(integer_range(low, high))
    for n in [*range(0, 3000), low - 1, low, high, high + 1, *(high // k for k in (2, 3, 7))]:
        if n >= 0:
            assert bool(pattern.fullmatch(str(n))) == (low <= n <= high), n
    assert not pattern.fullmatch("0" + str(max(low, 1)))  # no leading zeros


def test_alternation_matches_exactly_its_words() -> None:
    words = {str(60 * k) for k in range(1, 1441)}
    pattern = re.compile(alternation(words))
    for n in range(0, 90_000):
        assert bool(pattern.fullmatch(str(n))) == (str(n) in words), n


# --- ts ----------------------------------------------------------------------------------


def test_every_day_of_the_range_and_no_other() -> None:
    """Calendar included: each month's length, 29 February of leap years only."""
    day = date(MIN_YEAR - 1, 1, 1)
    while day <= date(MAX_YEAR + 1, 12, 31):
        text = f"{day.isoformat()}T12:00:00Z"
        assert bool(RFC3339_RE.fullmatch(text)) == (MIN_YEAR <= day.year <= MAX_YEAR), text
        day += timedelta(days=1)
    for year in (1970, 1972, 2000, 2023, 2024, 2099):
        for month in range(1, 13):
            for mday in (28, 29, 30, 31, 32):
                agree(RFC3339_RE, parse_ts, f"{year}-{month:02d}-{mday:02d}T00:00:00Z")
    assert calendar.isleap(2000) and RFC3339_RE.fullmatch("2000-02-29T00:00:00Z")
    assert not RFC3339_RE.fullmatch("2100-02-28T00:00:00Z")


_two = st.integers(0, 99).map(lambda n: f"{n:02d}")
_near_rfc3339 = st.builds(
    "{}-{}-{}{}{}:{}:{}{}{}".format,
    st.integers(1960, 2110).map(str) | st.sampled_from(["0001", "9999", "٢٠٢٦"]),
    _two,
    _two,
    st.sampled_from(["T", "t", " ", "_", "TT"]),
    _two,
    _two,
    _two,
    st.sampled_from(["", ".", ".5", ".123456789", ".1234567890"]),
    st.sampled_from(["", "Z", "z", "+00:00", "-23:59", "+24:00", "+05:60", "+0500", " Z"]),
)


@settings(max_examples=3000, deadline=None)
@given(st.from_regex(RFC3339_RE, fullmatch=True))
def test_every_rfc3339_the_pattern_admits_is_accepted(text: str) -> None:
    assert accepted(parse_ts, text), text


@settings(max_examples=5000, deadline=None)
@given(_near_rfc3339)
def test_near_rfc3339_strings_agree(text: str) -> None:
    agree(RFC3339_RE, parse_ts, text)


def _around(bound: float) -> list[str]:
    whole = int(bound)
    return [
        str(whole - 1),
        str(whole),
        str(whole + 1),
        f"{whole - 1}.999999999",
        f"{whole}.000000001",
        f"{whole}.0",
        f"{whole}.5",
    ]


def test_each_epoch_unit_at_its_bounds() -> None:
    """Exactly at and around each end of EPOCH_NUMBER_RANGES, fractions included:
    the exact value decides, not its float."""
    texts = {"0", "0.0", "-1", "00", "01", "1e9", "1714564800", "1714564800.", "+1", " 1"}
    for low, _, high in EPOCH_NUMBER_RANGES:
        texts |= {*_around(low), *_around(high)}
    for text in sorted(texts):
        agree(TS_TEXT_RE, parse_ts_text, text)
    assert TS_TEXT_RE.fullmatch("4102444799.999999999") and accepted(
        parse_ts_text, "4102444799.999999999"
    )
    assert not TS_TEXT_RE.fullmatch("100000000000")


@settings(max_examples=3000, deadline=None)
@given(st.from_regex(TS_TEXT_RE, fullmatch=True))
def test_every_from_to_the_pattern_admits_is_accepted(text: str) -> None:
    assert text == "" or accepted(parse_ts_text, text), text


_digits = st.text("0123456789", min_size=1, max_size=21)
_near_decimal = st.builds(
    "{}{}".format, _digits, st.sampled_from(["", ".", ".0", ".5", ".000000001", ".1234567890"])
)


@settings(max_examples=5000, deadline=None)
@given(_near_decimal | _near_rfc3339)
def test_near_from_to_strings_agree(text: str) -> None:
    agree(TS_TEXT_RE, parse_ts_text, text)


# --- bucket, sizes, Content-Encoding -----------------------------------------------------

BUCKET_RE = re.compile(_bucket_pattern())
SIZES_RE = re.compile(_sizes_pattern())


def bucket_accepted(text: str) -> bool:
    return accepted(lambda t: parse_bucket(t, default_s=300), text)


@settings(max_examples=5000, deadline=None)
@given(
    st.builds(
        "{}{}".format,
        st.text("0123456789", max_size=7),
        st.sampled_from(["", "s", "m", "min", "h", "d", "x", "mm", "hd"]),
    )
)
def test_bucket_pattern_is_what_parse_bucket_accepts(text: str) -> None:
    # The Query pattern [0-9a-z]* comes first, so only those characters reach it.
    assert bool(BUCKET_RE.fullmatch(text)) == bucket_accepted(text), text


def test_bucket_examples() -> None:
    for good in ("", "60", "300", "5m", "1min", "24h", "1d", "000060", "86400", "1440m"):
        assert BUCKET_RE.fullmatch(good) and bucket_accepted(good), good
    for bad in ("30", "90s", "2d", "25h", "0000060", "1441m", "0m", "0"):
        assert not BUCKET_RE.fullmatch(bad) and not bucket_accepted(bad), bad


def sizes_accepted(text: str) -> bool:
    return accepted(parse_sizes, text)


@settings(max_examples=3000, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["", " ", "1", "0", "007", " 16384 ", "1 2", "x", "1.5", str(2**50), str(2**50 + 1)]
        ),
        max_size=70,
    ).map(",".join)
)
def test_sizes_pattern_is_what_get_capacity_accepts(text: str) -> None:
    assert bool(SIZES_RE.fullmatch(text)) == sizes_accepted(text), text


def test_sizes_as_the_server_reads_them(client: object, read_headers: dict[str, str]) -> None:
    for text in ("", "16384, 65536", ",,5,,", "0", " , ", ",".join(["1"] * 65)):
        answer = client.get("/v1/capacity", params={"sizes": text}, headers=read_headers)  # type: ignore[attr-defined]
        assert (answer.status_code == 200) == bool(SIZES_RE.fullmatch(text)), (text, answer.text)


def encoding_accepted(value: str) -> bool:
    try:
        decompress(b"{}", value, 100)
    except UndecodableBody as exc:
        return "gzip" in str(exc) and "unsupported" not in str(exc)
    return True


@settings(max_examples=2000, deadline=None)
@given(
    st.builds(
        "{}{}".format,
        st.sampled_from(["", "gzip", "GZip", "x-gzip", "identity", "br", "deflate", "gzip, gzip"]),
        st.sampled_from(["", " ", "\t ", "\xa0", ";q=1"]),
    )
)
def test_content_encoding_pattern_is_what_decompress_accepts(value: str) -> None:
    assume(not value[:1].isspace())  # the next test
    assert bool(re.fullmatch(CONTENT_ENCODING_PATTERN, value)) == encoding_accepted(value), value


def test_leading_whitespace_is_the_one_known_gap() -> None:
    """A value starting with whitespace: HTTP strips a leading space or tab before
    the server sees it, and clients refuse to send any other (requests: "Invalid
    leading whitespace"), so the schema admits none; decompress would still take
    a latin-1 no-break space there (its strip() is Unicode's)."""
    for value in (" gzip", "\tgzip", "\xa0gzip", "\x85"):
        assert not re.fullmatch(CONTENT_ENCODING_PATTERN, value)
    assert encoding_accepted("\xa0gzip")
