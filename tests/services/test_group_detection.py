"""Group regressions and canaries through the detection job (contract sections 5 and
5a), on traffic where exactly one thing breaks (tests/services/group_traffic.py)."""

import random
import time
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from service.models import ChangeEvent, GroupRollup
from service.rfc3339 import us_to_rfc3339
from service.services import analytics_pass
from service.services.detection import detect
from service.services.events import EventIn, record_event
from service.services.group_detection import watched_groups
from service.services.regressions import regression_to_json
from service.settings import Settings
from tests.services import group_traffic as traffic
from tests.services.traffic import T0, US, rec, store

HOUR = 3600


def run(session: Session, settings: Settings, plan: traffic.Plan) -> list[dict[str, Any]]:
    store(session, traffic.traffic(plan))
    return [regression_to_json(r) for r in detect(session, settings).created]


def test_a_scenario_with_5_percent_of_the_tokens_that_loses_its_prefix_is_its_own_regression(
    session: Session, settings: Settings
) -> None:
    found = run(session, settings, traffic.Plan(ticket_breaks_at=2 * HOUR))
    (regression,) = found  # none for the service: it moved by 4 points
    assert regression["group"] == {"by": "scenario", "value": "ticket-summary"}
    assert regression["service"] == "assistant" and regression["canary"] is None
    assert abs(_ts(regression["change_ts"]) - (T0 + 2 * HOUR)) <= 300
    assert regression["before"]["hit_rate"] > 0.7 and regression["after"]["hit_rate"] < 0.1
    assert regression["cause"] == "prefix_instability"
    # The evidence is the scenario's own: every one of its requests starts differently
    # (the whole service's ratio moved only from about 0.02 to 0.07).
    assert any(
        line.startswith("unique_prefix_ratio") and "-> 1.00" in line
        for line in regression["evidence"]
    ), regression["evidence"]
    # Re-running finds the same change and stores nothing twice.
    assert detect(session, settings).created == []


def test_when_the_whole_service_breaks_there_is_one_regression_and_none_per_group(
    session: Session, settings: Settings
) -> None:
    found = run(session, settings, traffic.Plan(service_breaks_at=2 * HOUR))
    (regression,) = found
    assert regression["group"] is None
    assert regression["cause"] == "prefix_instability"


def _post_deploy(session: Session, at_s: float, tag: str) -> None:
    record_event(
        session, EventIn(ts=int((T0 + at_s) * US), service="assistant", kind="deploy", deploy=tag)
    )


def test_a_broken_10_percent_canary_is_found_within_the_minimum_duration(
    session: Session, settings: Settings
) -> None:
    canary_at = 2 * HOUR
    _post_deploy(session, canary_at, "v2")
    # Only the first minimum duration of the canary (30 minutes: 6 buckets of 5
    # minutes) and one bucket more have been sent.
    plan = traffic.Plan(hours=2 + 35 / 60, canary_at=canary_at)
    found = run(session, settings, plan)
    (regression,) = found
    assert regression["group"] == {"by": "deploy", "value": "v2"}
    first_v2 = min(
        r["ts"]
        for r in traffic.traffic(traffic.Plan(hours=2.4, canary_at=canary_at))
        if r["deploy"] == "v2"
    )
    assert regression["change_ts"] == us_to_rfc3339(round(first_v2 * US))
    posted = session.scalars(select(ChangeEvent).where(ChangeEvent.source == "posted")).one()
    assert regression["attributed_to"]["event_id"] == posted.id
    assert regression["attributed_to"]["deploy"] == "v2"
    assert regression["before"]["hit_rate"] > 0.7 and regression["after"]["hit_rate"] < 0.1
    assert regression["canary"]["baseline"] == "v1"
    assert 0.05 < regression["canary"]["share"] < 0.15
    assert regression["status"] == "open" and regression["cause"] == "prefix_instability"
    assert any("deploy v2 served" in line for line in regression["evidence"])


def test_a_healthy_canary_yields_nothing(session: Session, settings: Settings) -> None:
    _post_deploy(session, 2 * HOUR, "v2")
    found = run(session, settings, traffic.Plan(canary_at=2 * HOUR, canary_broken=False))
    assert found == []


def test_50_000_sparse_tenants_raise_nothing_and_keep_the_rollups_bounded(
    session: Session, settings: Settings
) -> None:
    tenants, hours = 50_000, 6
    records = traffic.sparse_tenants(tenants, hours)
    started = time.perf_counter()
    store(session, records)
    report = detect(session, settings)
    took = time.perf_counter() - started
    assert report.created == []
    rows = session.scalar(
        select(func.count()).select_from(GroupRollup).where(GroupRollup.group_by == "tenant")
    )
    finished = session.scalar(
        select(func.count())
        .select_from(GroupRollup)
        .where(
            GroupRollup.group_by == "tenant", GroupRollup.bucket_us < (T0 + (hours - 1) * HOUR) * US
        )
    )
    # Finished hours keep at most `group_values_kept` tenants each: one row per
    # tenant and minute at most, whatever the number of tenants.
    assert finished <= (hours - 1) * settings.group_values_kept * 60
    print(
        f"\n{len(records):,} records of {tenants:,} tenants over {hours} h: {rows:,} tenant "
        f"rollup rows ({finished:,} in the {hours - 1} finished hours), pass and detection "
        f"{took:.1f} s"
    )


def _ts(text: str) -> float:
    from service.ingest.timestamps import parse_ts_text

    return parse_ts_text(text) / US


def _many_tags() -> list[dict[str, Any]]:
    """Six releases, one every 30 minutes (a request every 20 s), then two hours of v1
    (a request every 10 s) with a broken 10% canary v2 from 4:00."""
    plan, rng, out = traffic.Plan(), random.Random(5), []

    def add(t: int, tag: str, broken: bool) -> None:
        blocks = traffic._blocks("chat", len(out), broken)
        out.append(
            rec(f"m{len(out)}", T0 + t, blocks, prompt_tokens=len(blocks) * 100,
                cached_tokens=traffic._cached(plan, blocks), scenario=f"s{len(out) % 5}",
                tenant=f"tenant-{len(out) % 4}", deploy=tag)
        )  # fmt: skip

    for t in range(0, 3 * HOUR, 20):
        add(t, f"old-{t // 1800}", False)
    for t in range(3 * HOUR, 5 * HOUR, 10):
        canary = t >= 4 * HOUR and rng.random() < 0.1
        add(t, "v2" if canary else "v1", canary)
    return out


def test_detection_watches_a_bounded_number_of_groups_and_the_tags_serving_last(
    session: Session, settings: Settings
) -> None:
    # Eight tags, five scenarios and four tenants; detection watches three of each
    # (two tenants): the busiest scenarios and tenants, and the tags that served last,
    # so the canary is still caught beside its release, though every old release
    # served more tokens than it.
    capped = settings.model_copy(update={"detect_max_group_values": 3, "detect_top_tenants": 2})
    store(session, _many_tags())
    analytics_pass.catch_up(session, capped)
    since_us = T0 * US
    watched = watched_groups(session, capped, ("assistant", "m"), since_us)
    assert watched["deploy"][:2] == ["v1", "v2"] and len(watched["deploy"]) == 3
    assert len(watched["scenario"]) == 3 and len(watched["tenant"]) == 2
    found = [regression_to_json(r) for r in detect(session, capped).created]
    (canary,) = [r for r in found if r["canary"] is not None]
    assert canary["group"] == {"by": "deploy", "value": "v2"}
    assert canary["canary"]["baseline"] == "v1"
