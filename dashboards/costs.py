"""The dashboard's words about money: the headline's "wasted in range" card against
the range before, a regression's cost cell and the note naming the models without
prices. Every amount is written by `service.alerts.money` (as in Slack and the
CLI); the page script only places these texts."""

from collections.abc import Mapping, Sequence
from typing import Any

from service.alerts.money import usd, usd_per_day
from service.services.dashboard import Prices

CENT = 0.01
#: What every headline card shows without data (as the page script's `pct(null)`).
NO_DATA = "\u2013"
#: Models named in a note before "and N more".
NOTE_MODELS = 8
MODELS_FILE_HINT = (
    "prices go in the models file (`CACHEWATCH_MODELS_FILE`: `input_usd_per_mtok`, "
    "`cached_usd_per_mtok`, `write_usd_per_mtok`)"
)


def wasted_card(current: Mapping[str, Any], previous: Mapping[str, Any]) -> dict[str, str]:
    """The headline card: the range's wasted dollars (`no prices` when none of its
    requests had prices, an en dash without requests), and how they moved against
    the previous range of equal length (`trend`: `worse` when more was wasted,
    `better` when less, empty when either side has no figure or it moved by less
    than half a cent)."""
    wasted, before = current["wasted_usd"], previous["wasted_usd"]
    if not current["requests"]:
        return {"value": NO_DATA, "delta": "", "trend": ""}
    card = {"value": usd(wasted), "delta": "", "trend": ""}
    if wasted is None:
        return card
    if not previous["requests"]:
        return {**card, "delta": "no data in the previous range"}
    if before is None:
        return {**card, "delta": "no prices in the previous range"}
    change = wasted - before
    relative = f" ({100 * change / before:+.0f}%)" if before > 0 else ""
    delta = f"{usd(change, signed=True)}{relative} vs {usd(before)} before"
    trend = "" if abs(change) < CENT / 2 else ("worse" if change > 0 else "better")
    return {**card, "delta": delta, "trend": trend}


def cost_cell(regression: Mapping[str, Any]) -> str:
    """A regression's extra dollars a day, `+$1,241/day`; `no prices` when its
    `cost` is null (contract section 5)."""
    cost = regression.get("cost")
    extra = cost.get("extra_usd_per_day") if isinstance(cost, Mapping) else None
    return usd_per_day(extra if isinstance(extra, int | float) else None, signed=True)


def _names(models: Sequence[str]) -> str:
    shown = ", ".join(models[:NOTE_MODELS])
    more = len(models) - NOTE_MODELS
    return shown + (f" and {more} more" if more > 0 else "")


def prices_note(prices: Prices) -> str | None:
    """Which models of the range the dollar figures leave out, and what to do
    (None: every request had prices)."""
    parts = []
    if prices.unpriced:
        one = len(prices.unpriced) == 1
        parts.append(
            f"No prices for {'model' if one else 'models'} {_names(prices.unpriced)}: "
            f"{'its' if one else 'their'} requests count in no dollar figure; "
            + MODELS_FILE_HINT
            + "."
        )
    if prices.partly_priced:
        parts.append(
            f"Some requests of {_names(prices.partly_priced)} have no prices and count in no "
            "dollar figure."
        )
    return " ".join(parts) or None
