"""The dashboard's words about money: the wasted card against the range before, the
regressions' cost cell and the note naming the models without prices."""

from typing import Any

from dashboards.costs import NOTE_MODELS, cost_cell, prices_note, wasted_card
from service.services.dashboard import Prices
from tests.alerts.test_message import regression


def sums(wasted: float | None, requests: int = 10) -> dict[str, Any]:
    return {"requests": requests, "wasted_usd": wasted}


def test_wasted_card_against_the_previous_range() -> None:
    assert wasted_card(sums(1240.5), sums(1120.0)) == {
        "value": "$1,241",
        "delta": "+$121 (+11%) vs $1,120 before",
        "trend": "worse",
    }
    assert wasted_card(sums(0.42), sums(12.5)) == {
        "value": "$0.42",
        "delta": "-$12.08 (-97%) vs $12.50 before",
        "trend": "better",
    }
    # Nothing wasted before: no percentage; a change under half a cent is no trend.
    assert wasted_card(sums(3.0), sums(0.0))["delta"] == "+$3.00 vs $0 before"
    steady = wasted_card(sums(5.001), sums(5.0))
    assert steady["delta"].startswith("+<$0.01") and steady["trend"] == ""
    assert wasted_card(sums(0.0), sums(0.0)) == {
        "value": "$0",
        "delta": "$0 vs $0 before",
        "trend": "",
    }


def test_wasted_card_without_prices_or_previous_data() -> None:
    assert wasted_card(sums(None, requests=0), sums(5.0))["value"] == "\u2013"  # no data
    assert wasted_card(sums(None), sums(5.0)) == {"value": "no prices", "delta": "", "trend": ""}
    assert wasted_card(sums(7.0), sums(None, requests=0))["delta"] == (
        "no data in the previous range"
    )
    assert wasted_card(sums(7.0), sums(None))["delta"] == "no prices in the previous range"


def test_cost_cell() -> None:
    assert cost_cell(regression()) == "+$1,241/day"
    cheaper = {"usd_per_day_before": 2.0, "usd_per_day_after": 1.5, "extra_usd_per_day": -0.5}
    assert cost_cell(regression(cost=cheaper)) == "-$0.50/day"
    for missing in (None, {}, {"extra_usd_per_day": "12"}, "x"):
        assert cost_cell(regression(cost=missing)) == "no prices"
    assert cost_cell({k: v for k, v in regression().items() if k != "cost"}) == "no prices"


def test_prices_note_names_the_models_left_out() -> None:
    assert prices_note(Prices((), ())) is None
    one = prices_note(Prices(("m2",), ()))
    assert one is not None and one.startswith("No prices for model m2: its requests count")
    assert "CACHEWATCH_MODELS_FILE" in one and "input_usd_per_mtok" in one
    both = prices_note(Prices(("a", "b"), ("c",)))
    assert both is not None and both.startswith("No prices for models a, b: their requests")
    assert both.endswith("Some requests of c have no prices and count in no dollar figure.")
    many = [f"m{i:02d}" for i in range(NOTE_MODELS + 3)]
    long = prices_note(Prices(tuple(many), ()))
    assert long is not None and f"m{NOTE_MODELS - 1:02d} and 3 more:" in long
    assert f"m{NOTE_MODELS:02d}" not in long
