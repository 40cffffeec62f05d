"""Findings (contract section 5b) on traffic with exactly one anti-pattern each, and
on healthy traffic."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from service.findings import REWARM_KINDS
from service.services.analytics_pass import catch_up
from service.services.findings import findings
from service.settings import Settings
from tests.analytics.reference import record, request_metrics
from tests.services import findings_traffic as traffic
from tests.services.traffic import store

BUILDERS: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "volatile_segment": traffic.volatile_segment,
    "template_drift": traffic.template_drift,
    "history_rewrite": traffic.history_rewrite,
    "routing": traffic.routing,
    "cold_fanout": traffic.cold_fanout,
    "eviction": traffic.eviction,
    "expiry": traffic.expiry,
    "below_minimum": traffic.below_minimum,
}
#: The caching profile MODELS_FILE gives each model: (min_prompt_tokens, ttl_s).
PROFILES = {"managed-sonnet": (None, 300.0), "short-haiku": (1024, None)}


@pytest.fixture
def profiled(tmp_path: Path, settings: Settings) -> Settings:
    path = tmp_path / "models.toml"
    path.write_text(traffic.MODELS_FILE)
    return settings.model_copy(update={"models_file": path})


def _found(session: Session, settings: Settings, records: list[dict[str, Any]]) -> Any:
    store(session, records)
    catch_up(session, settings)
    return findings(session, settings)


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_each_anti_pattern_alone_is_found_and_nothing_else(
    kind: str, session: Session, profiled: Settings
) -> None:
    result = _found(session, profiled, BUILDERS[kind]())
    assert [f.kind for f in result.findings] == [kind], [f.as_json() for f in result.findings]
    finding = result.findings[0]
    assert finding.service == "assistant"
    assert finding.share_of_prompt_tokens >= profiled.finding_min_share
    assert finding.evidence and finding.fix


def test_healthy_traffic_has_no_finding(session: Session, profiled: Settings) -> None:
    result = _found(session, profiled, traffic.healthy())
    assert result.findings == []
    assert "segments" not in result.missing and "sessions" not in result.missing


def _reference_days(records: list[dict[str, Any]]) -> float:
    first = min(r["ts"] for r in records) // 3600 * 3600
    last = max(r["ts"] for r in records) // 3600 * 3600 + 3600
    return (last - first) / 86_400


def _reference_rewarm_tokens(records: list[dict[str, Any]], cause: str) -> int:
    reference = []
    for i, r in enumerate(records, start=1):
        minimum, ttl = PROFILES.get(r["model"], (None, None))
        reference.append(
            record(
                id=i,
                ts_us=round(r["ts"] * 1_000_000),
                model=r["model"],
                prompt_tokens=r["prompt_tokens"],
                cached_tokens=r["cached_tokens"],
                ttft_ms=r.get("ttft_ms"),
                replica=r.get("replica"),
                session_id=r.get("session_id"),
                block_size=r["block_size"],
                block_hashes=r["block_hashes"],
                min_prompt_tokens=minimum,
                ttl_s=ttl,
            )
        )
    values = request_metrics(reference, 3600.0).values()
    return sum(v["rewarm_tokens"] for v in values if v["rewarm_cause"] == cause)


@pytest.mark.parametrize("kind", sorted(REWARM_KINDS))
def test_rewarm_kinds_waste_their_causes_rewarm_tokens_per_day(
    kind: str, session: Session, profiled: Settings
) -> None:
    records = BUILDERS[kind]()
    (finding,) = _found(session, profiled, records).findings
    expected = _reference_rewarm_tokens(records, REWARM_KINDS[kind])
    assert expected > 0
    assert finding.wasted_tokens_per_day == round(expected / _reference_days(records))


def test_expiry_counts_the_returns_a_longer_ttl_would_have_kept(
    session: Session, profiled: Settings
) -> None:
    (finding,) = _found(session, profiled, traffic.expiry()).findings
    assert finding.wasted_usd_per_day is not None and finding.wasted_usd_per_day > 0
    assert "TTL 5 min" in finding.evidence[0]
    assert "within twice the TTL" in finding.evidence[1]
    assert "5 min" in finding.fix


def test_eviction_sizes_the_budget_from_the_capacity_curve(
    session: Session, profiled: Settings
) -> None:
    (finding,) = _found(session, profiled, traffic.eviction()).findings
    capacity = " ".join(finding.evidence[1:])
    assert "a KV budget of" in capacity and "reaches 95% of the ceiling" in capacity
    assert "no `config` event told the KV budget" in capacity
    assert "at least" in finding.fix


def test_template_drift_names_who_sends_each_variant(session: Session, profiled: Settings) -> None:
    (finding,) = _found(session, profiled, traffic.template_drift()).findings
    assert finding.segment == "system"
    text = "\n".join(finding.evidence)
    assert "scenario `web-chat`" in text and "scenario `api-agent`" in text
    # The minority rendering's requests carry about 40% of the prompt tokens.
    assert 0.3 < finding.share_of_prompt_tokens < 0.5


def test_volatile_segment_says_how_many_variants_an_hour(
    session: Session, profiled: Settings
) -> None:
    (finding,) = _found(session, profiled, traffic.volatile_segment()).findings
    assert finding.segment == "system"
    assert "360 variants per hour over 360 requests" in finding.evidence[0]
    assert finding.wasted_tokens_per_day > 0
    assert "system prompt" in finding.fix


def test_min_share_silences_small_findings(session: Session, profiled: Settings) -> None:
    quiet = profiled.model_copy(update={"finding_min_share": 0.99})
    assert _found(session, quiet, traffic.routing()).findings == []


def test_no_data_no_findings_and_missing_fields_are_named(
    session: Session, settings: Settings
) -> None:
    assert findings(session, settings).findings == []
    records = [
        {k: v for k, v in r.items() if k not in ("segments", "ttft_ms")}
        for r in traffic.healthy()[:50]
    ]
    result = _found(session, settings, records)
    assert result.missing == ["segments", "ttft"]


def test_expiry_names_the_ttl_in_force_when_prefixes_expired(
    session: Session, profiled: Settings
) -> None:
    records = traffic.expiry()
    last = max(r["ts"] for r in records)
    # Later, the caller asks for an hour: new prefixes, no rewarm.
    later = [
        {**records[0], "request_id": f"later{i}", "ts": last + 3600 + i, "session_id": None,
         "block_hashes": [70_000_000 + 10 * i + j for j in range(4)], "prompt_tokens": 400,
         "cached_tokens": 0, "cache_ttl_s": 3600}
        for i in range(5)
    ]  # fmt: skip
    (finding,) = _found(session, profiled, records + later).findings
    assert "TTL 5 min" in finding.evidence[0] and "1 h" not in finding.fix


def test_a_volatile_start_in_conversations_is_one_finding_not_two(
    session: Session, profiled: Settings
) -> None:
    """A timestamp in the system prompt makes every continuation differ from its
    session's previous request (a history rewrite by the definition); those hours
    are the volatile segment's, which is the one finding."""
    result = _found(session, profiled, traffic.sessions(volatile_system=True))
    assert [f.kind for f in result.findings] == ["volatile_segment"]


def test_many_services_cost_no_query_each(session: Session, profiled: Settings) -> None:
    """100 services of a few requests each (issue 32: 20,000 one-request services
    took 40 s): the findings read a bounded number of statements, not one profile
    and one `config` look-up per (service, model)."""
    from sqlalchemy import event

    rows = [
        {**r, "request_id": f"{s}-{r['request_id']}", "service": f"svc-{s:03d}"}
        for s in range(100)
        for r in traffic.eviction()[:4]
    ]
    store(session, rows)
    catch_up(session, profiled)
    statements: list[str] = []
    engine = session.get_bind()

    def count(*args: Any) -> None:
        statements.append(str(args[2])[:60])

    event.listen(engine, "before_cursor_execute", count)
    try:
        result = findings(session, profiled)
    finally:
        event.remove(engine, "before_cursor_execute", count)
    assert {f.service for f in result.findings} >= {"svc-000", "svc-099"}
    assert len(statements) < 30, statements[:40]
