"""Dollars through the analytics pass (contract section 4a): records priced by the
models file in force, summed into the rollups, answered by /v1/metrics' service as
spend_usd, wasted_usd and wasted_usd_by_cause, null where nothing was priced; a
regression's cost (section 5) from the stretches either side of a drop; and the
Prometheus gauges."""

from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.orm import Session, sessionmaker

from service.analytics.definitions import CAUSES
from service.api.app import create_app
from service.services.analytics_pass import catch_up
from service.services.detection import detect
from service.services.metrics import HOUR_S, MetricsQuery, metrics
from service.settings import Settings
from tests.services.traffic import (
    BLOCKS,
    CACHED,
    INPUT,
    MODELS_FILE,
    T0,
    WRITE,
    drop_traffic,
    rec,
    store,
)


@pytest.fixture
def priced(tmp_path: Path, settings: Settings) -> Settings:
    path = tmp_path / "models.toml"
    path.write_text(MODELS_FILE)
    return settings.model_copy(update={"models_file": path})


def _answer(session: Session, **filters: str) -> dict[str, Any]:
    query = MetricsQuery(filters.get("service"), filters.get("model"), None, None, HOUR_S)
    return metrics(session, query)["totals"]


def test_spend_and_waste_equal_a_hand_computation(session: Session, priced: Settings) -> None:
    store(
        session,
        [
            rec("cold", T0, BLOCKS, prompt_tokens=2000, model="claude-x"),
            rec("warm", T0 + 10, [*BLOCKS[:19], 21], prompt_tokens=2000, cached_tokens=1900,
                model="claude-x"),
            # 1,900 cacheable tokens recomputed: an `unknown` rewarm (no replica).
            rec("miss", T0 + 20, [*BLOCKS[:19], 22], prompt_tokens=2000, model="claude-x"),
            rec("unpriced", T0 + 30, [1, 2], model="llama"),
        ],
    )  # fmt: skip
    catch_up(session, priced)
    spend = (2000 * INPUT + (100 * INPUT + 1900 * CACHED) + 2000 * INPUT) / 1e6
    wasted = 1900 * (INPUT - CACHED) / 1e6
    totals = _answer(session)
    assert totals["spend_usd"] == pytest.approx(spend)
    assert totals["wasted_usd"] == pytest.approx(wasted)
    assert totals["wasted_usd_by_cause"] == {
        **dict.fromkeys(CAUSES, 0.0),
        "unknown": pytest.approx(wasted),
    }
    # The unpriced model alone: null, not 0.
    alone = _answer(session, model="llama")
    assert alone["spend_usd"] is None and alone["wasted_usd"] is None
    assert alone["wasted_usd_by_cause"] == dict.fromkeys(CAUSES)


def test_the_models_file_gives_the_profile_causes(
    tmp_path: Path, settings: Settings, session: Session
) -> None:
    """The pass reads each record's minimum and TTL from its profile: a prefix
    unused for ten minutes under a 300 s TTL expired; a 900-token prompt under a
    1,024-token minimum is never cached."""
    path = tmp_path / "models.toml"
    path.write_text(MODELS_FILE + "ttl_s = 300\nmin_prompt_tokens = 1024\n")
    store(
        session,
        [
            rec("cold", T0, BLOCKS, prompt_tokens=2000, model="claude-x"),
            rec("expired", T0 + 600, BLOCKS, prompt_tokens=2000, model="claude-x"),
            rec("short", T0 + 610, BLOCKS[:9], prompt_tokens=900, model="claude-x"),
            # Asked for an hour: the same pause is no expiry (an unknown rewarm).
            rec("long-cold", T0, [100 + b for b in BLOCKS], prompt_tokens=2000,
                model="claude-x", cache_ttl_s=3600),
            rec("long-kept", T0 + 600, [100 + b for b in BLOCKS], prompt_tokens=2000,
                model="claude-x", cache_ttl_s=3600),
        ],
    )  # fmt: skip
    catch_up(session, settings.model_copy(update={"models_file": path}))
    totals = _answer(session)
    assert totals["rewarms"] == {**dict.fromkeys(CAUSES, 0), "total": 3, "expiry": 1,
                                 "below_minimum": 1, "unknown": 1}  # fmt: skip
    assert totals["wasted_usd_by_cause"]["expiry"] == pytest.approx(2000 * (INPUT - CACHED) / 1e6)
    assert totals["wasted_usd_by_cause"]["below_minimum"] == pytest.approx(
        900 * (INPUT - CACHED) / 1e6
    )


def test_cache_writes_are_billed_at_the_write_price(session: Session, priced: Settings) -> None:
    store(
        session,
        [
            rec("write", T0, BLOCKS, prompt_tokens=2000, model="claude-x",
                cache_write_tokens=1500),
        ],
    )  # fmt: skip
    catch_up(session, priced)
    totals = _answer(session)
    assert totals["cache_write_tokens"] == 1500
    assert totals["spend_usd"] == pytest.approx((500 * INPUT + 1500 * WRITE) / 1e6)


def test_without_a_models_file_self_hosted_traffic_has_no_prices(
    session: Session, settings: Settings
) -> None:
    store(session, [rec("a", T0, BLOCKS, prompt_tokens=2000, model="claude-x")])
    catch_up(session, settings)
    assert _answer(session)["spend_usd"] is None


def test_a_regression_costs_its_extra_dollars_a_day(session: Session, priced: Settings) -> None:
    store(session, drop_traffic())
    catch_up(session, priced)
    report = detect(session, priced)
    assert len(report.created) == 1
    cost = report.created[0].cost
    assert cost is not None
    per_request_before = (100 * INPUT + 1900 * CACHED) / 1e6
    per_request_after = 2000 * INPUT / 1e6
    requests_per_day = 86_400 / 60
    # The stretches are the detector's, so allow for a bucket or two either side.
    assert cost["usd_per_day_after"] == pytest.approx(per_request_after * requests_per_day, rel=0.1)
    assert cost["usd_per_day_before"] == pytest.approx(
        per_request_before * requests_per_day, rel=0.1
    )
    assert cost["extra_usd_per_day"] == pytest.approx(
        cost["usd_per_day_after"] - cost["usd_per_day_before"]
    )


def test_a_regression_without_prices_has_no_cost(session: Session, settings: Settings) -> None:
    store(session, drop_traffic())
    catch_up(session, settings)
    report = detect(session, settings)
    assert len(report.created) == 1 and report.created[0].cost is None


def test_prometheus_gauges_give_spend_and_waste_per_service_and_model(
    priced: Settings, session_factory: sessionmaker[Session], make_token: Any
) -> None:
    app: FastAPI = create_app(priced)
    app.state.sessionmaker = session_factory
    now = T0 + 7200
    with session_factory() as session:
        store(
            session,
            [
                rec("cold", now - 600, BLOCKS, prompt_tokens=2000, model="claude-x"),
                rec("miss", now - 590, [*BLOCKS[:19], 22], prompt_tokens=2000,
                    model="claude-x"),
                rec("free", now - 580, [1, 2], model="llama"),
            ],
        )  # fmt: skip
        catch_up(session, priced)
        session.commit()
    headers = {"Authorization": f"Bearer {make_token('read')}"}
    with TestClient(app) as client:
        from service import telemetry

        original = telemetry.time.time_ns
        telemetry.time.time_ns = lambda: now * 1_000_000_000  # type: ignore[assignment]
        try:
            text = client.get("/metrics", headers=headers).text
        finally:
            telemetry.time.time_ns = original  # type: ignore[assignment]
    values = {
        (s.name, s.labels.get("model")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name in ("cachewatch_spend_usd", "cachewatch_wasted_usd")
    }
    assert values[("cachewatch_spend_usd", "claude-x")] == pytest.approx(4000 * INPUT / 1e6)
    assert values[("cachewatch_wasted_usd", "claude-x")] == pytest.approx(
        1900 * (INPUT - CACHED) / 1e6
    )
    assert ("cachewatch_spend_usd", "llama") not in values  # no prices: no sample
