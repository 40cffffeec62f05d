"""What is, and is not, a regression on traffic shaped like production (contract
section 5c, issue 31): each class of false alarm and miss the issue measured, one
test each, through the detection job on days of seasonal traffic
(tests/services/season_traffic.py)."""

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from service.models import Regression
from service.rfc3339 import us_to_rfc3339
from service.services.detection import detect
from service.services.events import EventIn, record_event
from service.services.findings import findings
from service.services.regressions import regression_to_json
from service.settings import Settings
from tests.services import season_traffic as traffic
from tests.services.season_traffic import DAY, MONDAY, Break, Plan, at
from tests.services.traffic import store

US = 1_000_000


@pytest.fixture
def profiled(tmp_path: Path, settings: Settings) -> Settings:
    path = tmp_path / "models.toml"
    path.write_text(traffic.MODELS_FILE)
    return settings.model_copy(update={"models_file": path})


def regressions(session: Session) -> list[dict[str, Any]]:
    return [regression_to_json(r) for r in session.query(Regression).order_by(Regression.id)]


def detect_in_chunks(
    session: Session, settings: Settings, records: list[dict[str, Any]], chunk_s: float
) -> list[dict[str, Any]]:
    """Ship the records chunk by chunk, a detection pass after each, as a log shipper
    and a cron do; every regression stored at the end."""
    first = records[0]["ts"]
    chunk: list[dict[str, Any]] = []
    for record in records:
        if record["ts"] - first >= chunk_s and chunk:
            store(session, chunk)
            detect(session, settings)
            chunk, first = [], record["ts"]
        chunk.append(record)
    store(session, chunk)
    detect(session, settings)
    return regressions(session)


def test_recurring_lulls_are_no_regression_and_their_expiry_is_a_finding(
    session: Session, profiled: Settings
) -> None:
    """A managed API whose 5-minute TTL expires the shared start every evening, night
    and weekend (hit rate ~0.7 by day, ~0.2 at night), shipped in 2-day chunks: no
    regression, from the first evening on; the expiry is a finding that says what the
    quiet hours cost."""
    records = traffic.traffic(Plan(days=8))
    assert detect_in_chunks(session, profiled, records, 2 * DAY) == []
    expiry = next(f for f in findings(session, profiled).findings if f.kind == "expiry")
    assert any("quiet hours" in line for line in expiry.evidence), expiry.evidence
    assert "accept it" in expiry.fix


def test_a_group_that_dips_with_its_service_is_no_regression(
    session: Session, profiled: Settings
) -> None:
    """A tenant on the other side of the world: its working day is the service's
    evening, when the shared start expires between the few requests of everyone
    else. Its busy hours are the service's lull, every day: it did not fall against
    its service, and nothing is a regression."""
    plan = Plan(days=8, peak=0.1, late_tenant="tenant-late", late_rate=0.01)
    assert detect_in_chunks(session, profiled, traffic.traffic(plan), 2 * DAY) == []


def test_a_slow_erosion_is_one_regression_that_stays_open(
    session: Session, settings: Settings
) -> None:
    """A self-hosted service whose working set outgrows its KV budget a little more
    every day from day 3: daily passes report it once (not once a day, not per
    tenant), as eviction, still open."""
    plan = Plan(days=8, managed=False, eviction_from=at(3), eviction_per_day=0.12)
    found = detect_in_chunks(session, settings, traffic.traffic(plan), DAY)
    assert [(r["group"], r["cause"], r["status"]) for r in found] == [(None, "eviction", "open")]
    change = found[0]["change_ts"]
    assert (
        us_to_rfc3339(int((MONDAY + at(3)) * US))
        <= change
        <= us_to_rfc3339(int((MONDAY + at(5, 12)) * US))
    )


def test_one_session_dominating_a_quiet_hour_is_no_regression(
    session: Session, settings: Settings
) -> None:
    """Sunday morning: one agent session rewriting its history holds most of a quiet
    half hour's tokens. Its misses are its own, not the service's."""
    plan = Plan(days=7, managed=False, dominant_at=at(6, 8.5), dominant_requests=60)
    store(session, traffic.traffic(plan))
    detect(session, settings)
    assert regressions(session) == []


def test_a_busy_40_minute_break_rolled_back_is_one_regression(
    session: Session, profiled: Settings
) -> None:
    """The second Friday afternoon, a release breaks the prompt of 40% of the requests
    and is rolled back 40 minutes later, in days whose evenings and nights expire the
    shared start (a quiet service: 0.03 requests a second at its peak): that break is
    the one regression, attributed to the release, resolved; a 5-minute glitch on
    Tuesday and the lulls of 12 days are none (before issue 31, the evenings of the
    second week were reported as `expiry` regressions beside it)."""
    release = at(11, 15)
    some = lambda r: int(r["request_id"].rsplit("-", 1)[1]) % 10 < 4  # noqa: E731
    breaks = [Break(release, 40 * 60, some), Break(at(1, 11), 5 * 60)]
    plan = Plan(days=12, peak=0.03, breaks=breaks)
    record_event(
        session,
        EventIn(ts=int((MONDAY + release) * US), service="assistant", kind="deploy", deploy="v2"),
    )
    (found,) = detect_in_chunks(session, profiled, traffic.traffic(plan), 2 * DAY)
    assert found["group"] is None and found["cause"] == "prefix_instability"
    assert found["attributed_to"]["deploy"] == "v2"
    assert found["change_ts"] == us_to_rfc3339(int((MONDAY + release) * US))
    assert found["status"] == "resolved"


def test_a_sparse_tenants_change_is_dated_at_its_first_request_that_shows_it(
    session: Session, profiled: Settings
) -> None:
    """A tenant sending a few requests an hour starts putting a request id at the top
    of its prompts at 14:10, and sends nothing for the next half hour; the config
    event it posted at 14:10 is its attribution, which needs the change dated at its
    first broken request, not at its ordinary requests an hour or two earlier, and
    the event found in the quiet gap before that request (35 minutes: beyond the 15
    either side of a busy series' change)."""
    tenant = "tenant-sparse"
    change = at(3, 14 + 1 / 6)
    plan = Plan(
        days=5,
        sparse_tenant=tenant,
        sparse_weight=0.08,
        breaks=[Break(change, 2 * DAY, lambda r: r["tenant"] == tenant)],
    )
    quiet = (MONDAY + change, MONDAY + change + 1800)
    records = [
        r
        for r in traffic.traffic(plan)
        if not (r["tenant"] == tenant and quiet[0] <= r["ts"] < quiet[1])
    ]
    first_broken = min(
        r["ts"] for r in records if r["ts"] >= MONDAY + change and r["tenant"] == tenant
    )
    record_event(
        session,
        EventIn(
            ts=int((MONDAY + change) * US),
            service="assistant",
            kind="config",
            description=f"{tenant}: new integration",
        ),
    )
    store(session, records)
    detect(session, profiled)
    (found,) = regressions(session)
    assert found["group"] == {"by": "tenant", "value": tenant}
    assert found["cause"] == "prefix_instability"
    assert found["attributed_to"] is not None and found["attributed_to"]["kind"] == "config"
    bucket = int(first_broken // 300 * 300)
    assert found["change_ts"] == us_to_rfc3339(bucket * US)
    assert bucket - (MONDAY + change) > 1800
