"""Dollars for people, written once: the Slack message, `cachewatch detect` and the
dashboard all format money with `usd` and `usd_per_day`, so "$1,240/day" reads the
same wherever it shows.

The rules, by the size of the amount (its sign comes first, `-` or, when asked,
`+`):

* None: `no prices` (the model has no price: contract section 4a's null, which
  must never read as free);
* zero: `$0`; under a cent: `<$0.01` (the amount exists, a cent is too coarse);
* under $100: cents, `$0.42`, `$12.50`;
* under a million: whole dollars with thousands separators, `$1,240`;
* beyond: three significant digits and `M`, `B` or `T`, `$1.24M`, `$310B`;
  from a thousand trillion, `$5.00e+15`.

Rounding is half away from zero, as people round (1,650.5 is `$1,651`), and an
amount is placed by its rounded value: $99.996 is `$100`, not `$100.00`.
Not finite (NaN, infinity): `n/a`, as `wording.pct`."""

import math
from decimal import ROUND_HALF_UP, Decimal

NO_PRICES = "no prices"
#: Largest first.
_SCALES = (("T", 10**12), ("B", 10**9), ("M", 10**6))


def usd(value: float | None, *, signed: bool = False) -> str:
    """`$1,240`, `$0.42`, `<$0.01`, `$1.24M`; `signed`: `+$1,240` (zero unsigned)."""
    if value is None:
        return NO_PRICES
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return "n/a"
    if value == 0:  # the common case of a chart's hover texts, before any Decimal
        return "$0"
    magnitude = _magnitude(abs(float(value)))
    if magnitude == "$0":
        return magnitude
    sign = "-" if value < 0 else ("+" if signed else "")
    return sign + magnitude


def usd_per_day(value: float | None, *, signed: bool = False) -> str:
    """`$1,240/day`, `+$0.42/day`; None: `no prices`."""
    text = usd(value, signed=signed)
    return text if value is None or text == "n/a" else text + "/day"


def short_count(value: float) -> str:
    """A non-negative count of a million or more in the short form dollars take
    from a million on, without the `$`: `1.24M`, `310B`, `5.00e+15`
    (`wording.tokens` writes token counts with it)."""
    return _scaled(Decimal(repr(float(value))))


def _magnitude(amount: float) -> str:
    """A non-negative amount. Rounded half away from zero from its shortest decimal
    form (`repr`): 1650.5 is 1,651 and 2.675 is 2.68, where binary floats and
    round-half-even give 1,650 and 2.67. The thresholds are what rounds up to the
    next form: 99.995 is `$100`, 999,999.5 is `$1.00M`."""
    if 0.01 <= amount < 99.99 and not _cent_tie(amount):
        # Cents well inside their form, no half cent to round: the float's own
        # rounding is the same, at a fifth of the cost (a chart's 14,000 hover texts).
        return f"${amount:.2f}"
    exact = Decimal(repr(amount))
    if exact == 0:
        return "$0"
    if exact < Decimal("0.005"):
        return "<$0.01"
    if exact < Decimal("99.995"):
        return f"${exact.quantize(Decimal('0.01'), ROUND_HALF_UP):,.2f}"
    if exact < Decimal("999999.5"):
        return f"${exact.quantize(Decimal(1), ROUND_HALF_UP):,.0f}"
    return "$" + _scaled(exact)


def _cent_tie(amount: float) -> bool:
    """Whether the shortest decimal form of `amount` ends exactly on a half cent
    (`2.675`), where half away from zero and the float's rounding may differ."""
    text = repr(amount)
    return "e" not in text and len(text) - text.find(".") == 4 and text.endswith("5")


def _scaled(exact: Decimal) -> str:
    """A million or more in three significant digits and the largest unit it
    reaches once rounded: `1.24M`, `12.4B`, `124T`; from a thousand trillion (no
    real bill) in scientific notation, `5.00e+15`, so that no text grows long."""
    three = exact.quantize(Decimal(1).scaleb(exact.adjusted() - 2), ROUND_HALF_UP)
    if three >= 1000 * _SCALES[0][1]:
        return f"{three:.2e}"
    suffix, scale = next((s, v) for s, v in _SCALES if three >= v or s == "M")
    value = three / Decimal(scale)
    places = max(0, 2 - value.adjusted())
    return f"{value:,.{places}f}{suffix}"
