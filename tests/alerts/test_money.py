"""Dollars for people: one format for Slack, the CLI and the dashboard."""

import math
import random
from decimal import ROUND_HALF_UP, Decimal

import pytest

from service.alerts.money import NO_PRICES, usd, usd_per_day


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "no prices"),
        (0, "$0"),
        (0.0, "$0"),
        (-0.0, "$0"),
        (1e-9, "<$0.01"),
        (0.00499, "<$0.01"),
        (0.005, "$0.01"),
        (0.125, "$0.13"),  # half up, where round-half-even gives 0.12
        (2.675, "$2.68"),  # from the shortest decimal form (the float is 2.67499...)
        (0.42, "$0.42"),
        (5, "$5.00"),
        (12.5, "$12.50"),
        (99.994, "$99.99"),
        (99.995, "$100"),  # placed by its rounded value, not "$100.00"
        (1240.4999, "$1,240"),
        (1240.5, "$1,241"),
        (999_999.4, "$999,999"),
        (999_999.5, "$1.00M"),
        (1_234_000, "$1.23M"),
        (12_350_000, "$12.4M"),
        (999_400_000, "$999M"),
        (999_500_000, "$1.00B"),
        (3.1e9, "$3.10B"),
        (999.4e12, "$999T"),
        (999.5e12, "$1.00e+15"),
        (1e300, "$1.00e+300"),
        (math.nan, "n/a"),
        (math.inf, "n/a"),
        (True, "n/a"),
    ],
)
def test_usd(value: float | None, text: str) -> None:
    assert usd(value) == text
    if value is not None and text not in ("$0", "n/a"):
        assert usd(-value) == "-" + text
        assert usd(value, signed=True) == "+" + text


def test_signed_zero_and_negatives() -> None:
    assert usd(0, signed=True) == "$0"
    assert usd(-1240.5, signed=True) == "-$1,241"
    assert usd(-0.001, signed=True) == "-<$0.01"
    assert usd(-math.inf) == "n/a"


def test_usd_per_day() -> None:
    assert usd_per_day(1240.4999) == "$1,240/day"
    assert usd_per_day(0.42) == "$0.42/day"
    assert usd_per_day(1240.5, signed=True) == "+$1,241/day"
    assert usd_per_day(None) == usd_per_day(None, signed=True) == NO_PRICES
    assert usd_per_day(math.nan) == "n/a"


def test_text_stays_short_whatever_the_amount() -> None:
    for exponent in range(-12, 309):
        for mantissa in (1.0, 4.99, 9.999):
            assert len(usd(-mantissa * 10.0**exponent, signed=True)) <= 12, exponent


def test_cents_round_half_away_from_zero_from_the_shortest_form() -> None:
    """The float's own rounding (the fast path) agrees with half away from zero
    from the shortest decimal form everywhere in the cents range, ties included."""
    rng = random.Random(7)
    amounts = [rng.uniform(0.005, 99.995) for _ in range(20_000)]
    amounts += [round(a, 3) for a in amounts[:5_000]]  # many exact half cents
    amounts += [0.005, 0.015, 1.005, 2.675, 99.985, 99.99, 99.994999]
    for amount in amounts:
        exact = Decimal(repr(amount)).quantize(Decimal("0.01"), ROUND_HALF_UP)
        expected = "$100" if exact >= 100 else f"${exact:,.2f}"
        assert usd(amount) == expected, amount
