"""Findings (contract section 5b): the anti-patterns of a range, computed on read
from the rollups (`service.findings` holds the logic; this module reads its
inputs and the evidence's facts).

The range is whole hours: the hours that start in [from, to) (`from` rounded down
to its hour), as the hour rollups hold them. Nothing is stored and nothing alerts.

The eviction finding's capacity curve replays the newest
`REPLAY_MAX_REQUESTS` requests with block hashes of the model in the range (as the
dashboard's capacity figure does), only when an eviction finding is reported, once
per model, on a thread pool while the segment rollups are read. A replay costs 0.15
to 0.5 s on 20,000 requests of 128 blocks, so its result is kept per process
(`_REPLAYS`, the newest `_REPLAYS_KEPT`), keyed by the model, the range and the
newest record id: any new record makes a new key, so a kept curve is never stale."""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor

import polars as pl
from sqlalchemy.orm import Session

from service.analytics.budget import parse_budget
from service.analytics.capacity import REPLAY_MAX_REQUESTS, CapacityResult, capacity_curve
from service.findings import rewarms, segments
from service.findings.kinds import MISSING_DATA, FindingsResult, worst_first
from service.findings.rewarms import Capacity, Facts, Scope
from service.findings.thresholds import Thresholds
from service.profiles import Profile, Profiles, profiles_for
from service.repository import dashboard as dashboard_repo
from service.repository import findings as findings_repo
from service.repository import segments as segments_repo
from service.services.diagnoses import with_provider_evidence
from service.settings import Settings
from service.timeunits import HOUR_US as _HOUR_US

#: The capacity curve is read at these sizes (tokens): 1Ki to 16Gi, two a doubling.
_SIZES = tuple(round(1024 * 2 ** (k / 2)) for k in range(0, 2 * 24 + 1))
_REPLAYS_KEPT = 16
_REPLAY_THREADS = 2
_REPLAYS: OrderedDict[tuple[str, int, int, int], tuple[CapacityResult, int]] = OrderedDict()
_REPLAYS_LOCK = threading.Lock()


def findings(
    session: Session,
    settings: Settings,
    *,
    service: str | None = None,
    model: str | None = None,
    from_us: int | None = None,
    to_us: int | None = None,
) -> FindingsResult:
    thresholds = Thresholds.of(settings)
    start = None if from_us is None else from_us // _HOUR_US * _HOUR_US
    hours, replicas, had_ttft = findings_repo.hourly_sums(
        session, sums=rewarms.SUMS_READ, service=service, model=model, from_us=start, to_us=to_us
    )
    scopes = rewarms.scopes(hours)
    if not scopes:
        return FindingsResult([], [], 0.0)
    profiles = profiles_for(settings)
    resolved = {
        (s.service, s.model): _profile(session, s, profiles, to_us)
        for s in rewarms.profiled_scopes(scopes, thresholds)
    }
    facts = {
        (s.service, s.model): _facts(
            (s.service, s.model), resolved.get((s.service, s.model), (None, None)), replicas
        )
        for s in scopes
    }
    evicting = rewarms.eviction_scopes(scopes, thresholds)
    low, high = start if start is not None else 0, to_us if to_us is not None else 2**62
    with ThreadPoolExecutor(max_workers=_REPLAY_THREADS) as pool:
        # The replays run while the segment rollups are read.
        pending = _start_replays(session, pool, sorted({s.model for s in evicting}), low, high)
        frames = _segment_frames(session, scopes, thresholds, start, to_us)
        rate = _rates(resolved)
        curves = {model: future.result() for model, future in pending.items()}
    budgets = _posted_budgets(session, evicting, high)
    for scope in evicting:
        key = (scope.service, scope.model)
        facts[key] = _with_capacity(facts[key], scope, thresholds, curves, budgets.get(key))
    found = [
        *segments.volatile_findings(frames, scopes, thresholds, rate),
        *segments.drift_findings(frames, scopes, thresholds, rate),
        *rewarms.rewarm_findings(scopes, thresholds, facts),
        *rewarms.history_findings(scopes, thresholds, frames.volatile_hours()),
    ]
    days = max(s.days for s in scopes)
    missing = _missing(scopes, replicas, had_ttft, frames.spans)
    found = with_provider_evidence(session, found, start, to_us)
    return FindingsResult(worst_first(found), missing, days)


def _segment_frames(
    session: Session,
    scopes: list[Scope],
    thresholds: Thresholds,
    from_us: int | None,
    to_us: int | None,
) -> segments.SegmentFrames:
    """The segment rollups of every service of the scopes' models (template drift
    compares services), summed by the database."""
    models = sorted({s.model for s in scopes})
    return segments.SegmentFrames(
        volatile=segments_repo.volatile_hours(
            session,
            models=models,
            from_us=from_us,
            to_us=to_us,
            min_requests=thresholds.volatile_min_requests,
            share=thresholds.volatile_share,
        ),
        spans=segments_repo.segment_spans(session, models=models, from_us=from_us, to_us=to_us),
        variants=segments_repo.frequent_variants(
            session,
            models=models,
            from_us=from_us,
            to_us=to_us,
            min_share=thresholds.drift_variant_share,
        ),
        bare=segments_repo.bare_variant_counts(
            session, models=models, from_us=from_us, to_us=to_us
        ),
    )


def _missing(
    scopes: list[Scope],
    replicas: dict[tuple[str, str], set[str]],
    had_ttft: bool,
    segment_rows: pl.DataFrame,
) -> list[str]:
    """What the range lacks for some kinds to be found at all (MISSING_DATA codes)."""
    total = {c: sum(s.totals[c] for s in scopes) for c in ("fp_requests", "session_requests")}
    lacking = {
        "segments": segment_rows.is_empty(),
        "fingerprints": total["fp_requests"] == 0,
        "sessions": total["session_requests"] == 0,
        "replicas": not any(replicas.values()),
        "ttft": not had_ttft,
    }
    return [code for code in MISSING_DATA if lacking[code]]


def _profile(
    session: Session, scope: Scope, profiles: Profiles, to_us: int | None
) -> tuple[Profile | None, float | None]:
    """The scope's caching profile and the TTL in force at its last expiry: the
    newest record's before the end of the last hour with expiry rewarms (a TTL raised
    since would not explain them), else before the range's end."""
    expired = scope.hours.filter(pl.col("rewarm_tokens_expiry") > 0)["bucket_us"]
    until = int(expired[-1]) + _HOUR_US if expired.len() else to_us
    newest = findings_repo.newest_record(session, scope.service, scope.model, until)
    provider, record_ttl = newest if newest is not None else (None, None)
    profile = profiles.resolve(scope.model, provider)
    ttl = record_ttl if record_ttl is not None else (profile.ttl_s if profile else None)
    return profile, ttl


def _facts(
    key: tuple[str, str],
    resolved: tuple[Profile | None, float | None],
    replicas: dict[tuple[str, str], set[str]],
) -> Facts:
    """The replicas, and the profile's minimum and TTL."""
    profile, ttl = resolved
    return Facts(
        replicas=len(replicas.get(key, set())),
        ttl_s=ttl,
        min_prompt_tokens=profile.min_prompt_tokens if profile else None,
    )


def _rates(
    resolved: dict[tuple[str, str], tuple[Profile | None, float | None]],
) -> dict[str, float | None]:
    """Per model, dollars per token a miss costs above a hit: the input price less
    the cached price of its profile (None: no prices)."""
    out: dict[str, float | None] = {}
    for (_, model), (profile, _) in resolved.items():
        if model in out:
            continue
        if profile is None or profile.input_usd_per_mtok is None:
            out[model] = None
        else:
            cached = profile.cached_usd_per_mtok or 0.0
            out[model] = (profile.input_usd_per_mtok - cached) / 1e6
    return out


def _with_capacity(
    facts: Facts,
    scope: Scope,
    thresholds: Thresholds,
    curves: dict[str, tuple[CapacityResult, int]],
    posted: int | None,
) -> Facts:
    curve, replayed = curves[scope.model]
    needed = None
    if curve.ceiling:
        target = thresholds.ceiling_target * curve.ceiling
        reached = [p.tokens for p in curve.points if (p.hit_rate or 0.0) >= target]
        needed = min(reached) if reached else None
    capacity = Capacity(needed, curve.ceiling, thresholds.ceiling_target, replayed, posted)
    return dataclasses.replace(facts, capacity=capacity)


#: The `config` events a scope's posted KV budget is looked for in: its newest.
_BUDGET_EVENTS = 200
#: The `config` events one read looks at, for all its scopes.
_BUDGET_EVENTS_READ = 100_000


def _posted_budgets(session: Session, scopes: list[Scope], high: int) -> dict[tuple[str, str], int]:
    """Per scope, the KV budget of its newest `config` event before `high` that tells
    one (among its newest `_BUDGET_EVENTS`; events of no model count for every
    model): one read of the models' config events for every scope at once."""
    if not scopes:
        return {}
    events = findings_repo.config_events(
        session, sorted({s.model for s in scopes}), high, _BUDGET_EVENTS_READ
    )
    out: dict[tuple[str, str], int] = {}
    seen: dict[tuple[str, str], int] = {}
    wanted = {(s.service, s.model) for s in scopes}
    models = sorted({s.model for s in scopes})
    for service, model, description in events:
        for key in [(service, m) for m in ([model] if model is not None else models)]:
            if key not in wanted or key in out or seen.get(key, 0) >= _BUDGET_EVENTS:
                continue
            seen[key] = seen.get(key, 0) + 1
            budget = parse_budget(description)
            if budget is not None:
                out[key] = budget
    return out


def _start_replays(
    session: Session, pool: ThreadPoolExecutor, models: list[str], low: int, high: int
) -> dict[str, Future[tuple[CapacityResult, int]]]:
    """Per model, the capacity curve of its newest requests in [low, high) and how
    many it replayed, to come: kept per process (module docstring), else replayed on
    `pool` as soon as its sample is read (NumPy releases the GIL in its sorts, and
    SQLite while it reads, so replays and reads overlap)."""
    newest = dashboard_repo.newest_usage_id(session)
    out: dict[str, Future[tuple[CapacityResult, int]]] = {}
    for model in models:
        key = (model, low, high, newest)
        with _REPLAYS_LOCK:
            kept = _REPLAYS.get(key)
            if kept is not None:
                _REPLAYS.move_to_end(key)
        if kept is not None:
            out[model] = Future()
            out[model].set_result(kept)
            continue
        sample = dashboard_repo.latest_block_frame(session, model, low, high, REPLAY_MAX_REQUESTS)
        out[model] = pool.submit(_replay_and_keep, key, sample)
    return out


def _replay_and_keep(
    key: tuple[str, int, int, int], sample: pl.DataFrame
) -> tuple[CapacityResult, int]:
    replayed = (capacity_curve(sample, _SIZES), sample.height)
    with _REPLAYS_LOCK:
        _REPLAYS[key] = replayed
        while len(_REPLAYS) > _REPLAYS_KEPT:
            _REPLAYS.popitem(last=False)
    return replayed
