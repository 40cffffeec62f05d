"""The dashboard's reads on the real database: what the filters select, the headline
sums and the busiest model from the chart rollups, the tables (regressions with
their alerts, top prefixes), the series request's events, the capacity sample and
the versions that key cached answers."""

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update
from sqlalchemy.orm import Session

from dashboards.data import headline_values
from service.models import Regression
from service.repository import alerts as alerts_repo
from service.repository.series import CHART_TABLE
from service.services import analytics_pass
from service.services import dashboard as reads
from service.services.events import EventIn, record_events
from service.settings import Settings
from tests.alerts.conftest import FIXED_REGRESSION
from tests.dashboards.helpers import CACHED_USD, INPUT_USD, MODELS_FILE, records
from tests.simulated import load_records

DAY_S = 86_400
T0_S = 1_764_374_400  # 2025-11-29T00:00:00Z, a whole day
US = 1_000_000


def window(from_s: int, to_s: int, **fields: Any) -> reads.Window:
    span_us = (to_s - from_s) * US
    from_us, to_us = from_s * US, to_s * US
    return reads.Window(
        fields.get("service"),
        fields.get("model"),
        from_us,
        to_us,
        fields.get("bucket_s", 3600),
        (from_us - span_us, from_us),
    )


@pytest.fixture
def stored(session: Session, settings: Settings) -> list[dict[str, Any]]:
    """Two days of service `a` on model m, the second day of `b` on m and m2 (m2
    busier); caught up."""
    rows = [
        *records(200, T0_S, 2 * DAY_S, service="a", model="m"),
        *records(100, T0_S + DAY_S, DAY_S, service="b", model="m", seed=1),
        *records(300, T0_S + DAY_S, DAY_S, service="b", model="m2", seed=2),
    ]
    load_records(session, rows, [])
    analytics_pass.catch_up(session, settings)
    return rows


def sums(rows: list[dict[str, Any]], from_s: int, to_s: int, **only: str) -> dict[str, int]:
    """What the headline sums, counted from the records themselves."""
    chosen = [
        r
        for r in rows
        if from_s <= r["ts"] < to_s and all(r[key] == value for key, value in only.items())
    ]
    return {
        "requests": len(chosen),
        "prompt_tokens": sum(r["prompt_tokens"] for r in chosen),
        "cached_tokens": sum(r["cached_tokens"] for r in chosen),
    }


def test_the_selection_names_the_pairs_with_data_and_their_newest_minute(
    session: Session, stored: list[dict[str, Any]]
) -> None:
    assert reads.series_keys(session) == [("a", "m"), ("b", "m"), ("b", "m2")]
    everything = reads.selected(session, None, None)
    assert (everything.services, everything.models) == (("a", "b"), ("m", "m2"))
    newest_s = max(r["ts"] for r in stored)
    assert everything.newest_us == int(newest_s // 60 * 60) * US
    only_m2 = reads.selected(session, None, "m2")
    assert (only_m2.services, only_m2.models) == (("b",), ("m2",))
    nothing = reads.selected(session, "nobody", None)
    assert (nothing.services, nothing.newest_us) == ((), None)


@pytest.mark.parametrize(
    ("service", "model"), [(None, None), ("a", None), (None, "m2"), ("b", "m")]
)
def test_the_headline_sums_are_the_records_sums(
    session: Session, stored: list[dict[str, Any]], service: str | None, model: str | None
) -> None:
    """Over whole days and ragged hours: the range is read from day, hour and minute
    chart rows, and only one service's rows when only one has data."""
    from_s, to_s = T0_S + 3 * 3600 + 600, T0_S + 2 * DAY_S
    selection = reads.selected(session, service, model)
    totals = reads.range_totals(session, reads.scope_of(selection, model, from_s * US, to_s * US))
    only = {k: v for k, v in (("service", service), ("model", model)) if v is not None}
    assert {k: totals[k] for k in ("requests", "prompt_tokens", "cached_tokens")} == sums(
        stored, from_s, to_s, **only
    )
    assert set(totals) == set(reads.TOTAL_COLUMNS)


def test_nothing_selected_reads_nothing(session: Session) -> None:
    empty = reads.scope_of(reads.Selection((), (), None), None, 0, DAY_S * US)
    assert reads.range_totals(session, empty) == dict.fromkeys(reads.TOTAL_COLUMNS, 0)
    assert reads.top_prefixes(session, empty, 10) == []
    assert reads.busiest_model(session, empty) is None


def test_the_capacity_figure_replays_the_busiest_model_unless_one_is_selected(
    session: Session, stored: list[dict[str, Any]]
) -> None:
    selection = reads.selected(session, None, None)
    day_two = window(T0_S + DAY_S, T0_S + 2 * DAY_S)
    assert reads.capacity_model(session, selection, day_two) == "m2"
    assert reads.capacity_model(session, selection, window(T0_S, T0_S + DAY_S)) == "m"
    chosen = window(T0_S + DAY_S, T0_S + 2 * DAY_S, model="m")
    assert reads.capacity_model(session, reads.selected(session, None, "m"), chosen) == "m"


def test_the_capacity_sample_is_the_latest_requests_in_order_and_replays(
    session: Session, stored: list[dict[str, Any]]
) -> None:
    frame = reads.capacity_sample(session, "m2", T0_S * US, (T0_S + 2 * DAY_S) * US, 50)
    assert frame.height == 50
    times = frame["ts_us"].to_list()
    assert times == sorted(times)
    newest_m2 = max(r["ts"] for r in stored if r["model"] == "m2")
    assert times[-1] == round(newest_m2 * US)
    replay = reads.replay_capacity(frame, [1024, 1 << 20], "m2")
    assert (replay["model"], replay["requests"], replay["block_size"]) == ("m2", 50, 256)
    assert [p["tokens"] for p in replay["points"]] == [1024, 1 << 20]
    assert replay["from"] is not None and replay["ceiling"] is not None


def test_the_tables_read_regressions_with_their_alerts_and_the_top_prefixes(
    session: Session, stored: list[dict[str, Any]]
) -> None:
    in_range = Regression(
        **{**FIXED_REGRESSION, "service": "b", "change_ts_us": (T0_S + DAY_S) * US}
    )
    before = Regression(**{**FIXED_REGRESSION, "change_ts_us": (T0_S - DAY_S) * US,
                           "status": "resolved", "resolved_at_us": (T0_S - 1) * US})  # fmt: skip
    session.add_all([in_range, before])
    session.flush()
    alerts_repo.add_alert(session, in_range.id, "opened", 1)
    alerts_repo.add_alert(session, in_range.id, "resolved", 2)
    day_two = window(T0_S + DAY_S, T0_S + 2 * DAY_S)
    tables = reads.read_tables(session, reads.selected(session, None, None), day_two, 10)
    assert [r.id for r in tables.regressions] == [in_range.id]
    assert tables.alert_states == {in_range.id: ["opened: pending", "resolved: pending"]}
    # Every record starts with the same four blocks: one leading prefix per pair,
    # the busiest first; on day two `a` has 100 requests on m, as `b`.
    requests = {(p["service"], p["model"]): p["requests"] for p in tables.prefixes}
    assert requests == {("b", "m2"): 300, ("b", "m"): 100, ("a", "m"): 100}
    assert (tables.prefixes[0]["model"], tables.prefixes[0]["replicas"]) == ("m2", 2)
    top = reads.read_tables(session, reads.selected(session, "b", None), day_two, 1)
    assert [(p["service"], p["model"]) for p in top.prefixes] == [("b", "m2")]


def test_the_series_reading_has_the_buckets_sums_and_events_of_the_range(
    session: Session, stored: list[dict[str, Any]]
) -> None:
    record_events(
        session,
        [
            EventIn(ts=(T0_S + DAY_S + 60) * US, service="b", kind="note", model="m2"),
            EventIn(ts=(T0_S + DAY_S + 120) * US, service="b", kind="note"),  # every model
            EventIn(ts=(T0_S + DAY_S + 180) * US, service="b", kind="note", model="m"),
            EventIn(ts=(T0_S + 60) * US, service="b", kind="note"),  # the day before
        ],
    )
    day_two = window(T0_S + DAY_S, T0_S + 2 * DAY_S, service="b", model="m2")
    reading = reads.read_series(session, reads.selected(session, "b", "m2"), day_two, 10)
    assert reading.answer is not None and len(reading.answer.buckets) == 24
    assert reading.current["requests"] == 300
    assert reading.previous["requests"] == 0
    assert [e.ts_us for e in reading.events] == [(T0_S + DAY_S + s) * US for s in (120, 60)]
    nothing = reads.read_series(session, reads.selected(session, "nobody", None), day_two, 10)
    assert nothing.answer is None and nothing.current["requests"] == 0


def test_the_versions_move_with_records_events_and_alerts(
    session: Session, settings: Settings
) -> None:
    data, alerts = reads.data_version(session), reads.alerts_version(session)
    load_records(session, records(3, T0_S, 60, service="a"), [])
    assert reads.data_version(session) > data
    data = reads.data_version(session)
    record_events(session, [EventIn(ts=T0_S * US, service="a", kind="note")])
    assert reads.data_version(session) > data
    regression = Regression(**FIXED_REGRESSION)
    session.add(regression)
    session.flush()
    assert reads.alerts_version(session) == alerts
    alerts_repo.add_alert(session, regression.id, "opened", 10**15)
    assert reads.alerts_version(session) > alerts
    assert reads.newest_usage_id(session) == reads.data_version(session)[0]


def price_chart_rows(session: Session, model: str, usd_per_token: float, **only: str) -> None:
    """Prices by hand on the chart rows of one model (of every service, or of
    `service=`): every request priced, spend and waste in proportion to its tokens.
    For what the models file cannot give: a model only some of whose requests are
    priced."""
    c = CHART_TABLE.c
    where = [c.model == model, *[c[k] == v for k, v in only.items()]]
    session.execute(
        update(CHART_TABLE)
        .where(*where)
        .values(
            priced_requests=c.requests,
            spend_usd=c.prompt_tokens * usd_per_token,
            wasted_usd=c.rewarm_tokens * usd_per_token,
        )
    )


@pytest.fixture
def priced(session: Session, settings: Settings, tmp_path: Path) -> list[dict[str, Any]]:
    """The `stored` traffic, with a models file that prices m (not m2)."""
    path = tmp_path / "models.toml"
    path.write_text(MODELS_FILE, encoding="utf-8")
    rows = [
        *records(200, T0_S, 2 * DAY_S, service="a", model="m"),
        *records(100, T0_S + DAY_S, DAY_S, service="b", model="m", seed=1),
        *records(300, T0_S + DAY_S, DAY_S, service="b", model="m2", seed=2),
    ]
    load_records(session, rows, [])
    analytics_pass.catch_up(session, settings.model_copy(update={"models_file": path}))
    return rows


def spend_of(rows: list[dict[str, Any]], from_s: int, to_s: int, model: str) -> float:
    """Contract section 4a's spend of the records, by hand (no cache writes)."""
    return sum(
        ((r["prompt_tokens"] - r["cached_tokens"]) * INPUT_USD + r["cached_tokens"] * CACHED_USD)
        / 1e6
        for r in rows
        if from_s <= r["ts"] < to_s and r["model"] == model
    )


def test_the_headline_dollars_and_the_models_without_prices(
    session: Session, priced: list[dict[str, Any]]
) -> None:
    """m priced, m2 not: m's dollars are its records' (section 4a), m2's None (not
    0), and the models in range without prices are named, for the selection only."""

    def reading(service: str | None, model: str | None) -> reads.SeriesReading:
        day_two = window(T0_S + DAY_S, T0_S + 2 * DAY_S, service=service, model=model)
        return reads.read_series(session, reads.selected(session, service, model), day_two, 10)

    assert reading(None, None).prices == reads.Prices(("m2",), ())
    only_m = reading(None, "m")
    assert only_m.prices == reads.Prices((), ())
    spend = headline_values(only_m.current)["spend_usd"]
    assert spend == pytest.approx(spend_of(priced, T0_S + DAY_S, T0_S + 2 * DAY_S, "m"))
    before = headline_values(only_m.previous)["spend_usd"]
    assert before == pytest.approx(spend_of(priced, T0_S, T0_S + DAY_S, "m"))
    wasted = headline_values(only_m.current)["wasted_usd"]
    rewarm_tokens = only_m.current["rewarm_tokens"]
    assert rewarm_tokens > 0 and wasted is not None and wasted > 0
    # A rewarm's uncached tokens cost the input price (no cache writes here).
    assert wasted == pytest.approx(rewarm_tokens * (INPUT_USD - CACHED_USD) / 1e6)
    only_m2 = reading("b", "m2")
    assert only_m2.current["requests"] == 300 and only_m2.prices == reads.Prices(("m2",), ())
    assert headline_values(only_m2.current)["spend_usd"] is None
    assert headline_values(only_m2.current)["wasted_usd"] is None
    assert reading("a", None).prices == reads.Prices((), ())


def test_a_model_with_some_requests_priced_is_named_apart(
    session: Session, stored: list[dict[str, Any]]
) -> None:
    price_chart_rows(session, "m", 1e-6)
    c = CHART_TABLE.c
    session.execute(
        update(CHART_TABLE)
        .where(c.model == "m", c.service == "b", c.level == 0)
        .values(priced_requests=c.requests - 1)
    )
    day_two = window(T0_S + DAY_S, T0_S + 2 * DAY_S, service="b")
    selection = reads.selected(session, "b", None)
    assert reads.read_series(session, selection, day_two, 10).prices == reads.Prices(
        ("m2",), ("m",)
    )
    # Nothing selected, nothing read.
    empty = reads.scope_of(reads.Selection((), (), None), None, 0, DAY_S * US)
    assert reads.price_coverage(session, empty) == reads.Prices((), ())
