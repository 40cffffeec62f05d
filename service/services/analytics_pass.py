"""The incremental analytics pass: records committed since the cursor -> per-request
values (`service.analytics`) -> rollups.

Forward case: the new records all sort after the state's watermark; they are
computed with the saved state and added into the rollups (only the tail buckets
already exist, and those are merged).

Late records (a `ts` before the watermark, e.g. one shipper lagging behind
another): results from the hour of the earliest late record on are rebuilt. The
records from W before that hour are reloaded, the state is rewound, and every
rollup from that hour on is replaced (see `service.analytics.state`). Either way
the chart rollups are then rebuilt from the first changed minute on
(`service.services.chart_rollups`). Exact, at the
cost of reloading about one hour plus W of traffic for that pass.

Each record is read with its caching profile (`service.profiles`: the models file
in force when the pass runs, then the built-ins): its minimum and TTL decide the
`below_minimum` and `expiry` causes, its prices the dollars. Results already in the
rollups keep the profile they were computed with; a changed models file applies
from the next records on (and to any hour a late record makes the pass rebuild).
docs/providers.md says so to users."""

import time
from dataclasses import dataclass

import polars as pl
from sqlalchemy.orm import Session

from service import repository
from service.analytics.definitions import SUM_COLUMNS
from service.analytics.requests import compute_request_metrics
from service.analytics.state import UNBOUNDED_US, ReuseState, earliest_late, plan_from
from service.clickhouse import clickhouse_of
from service.profiles import Profiles, profiles_for
from service.repository import groups as groups_repo
from service.repository import retention as retention_repo
from service.repository import segments as segments_repo
from service.rollups import aggregate, groups, segments
from service.services import chart_rollups
from service.settings import Settings

CURSOR = "usage"
STATE = "reuse"
#: The first hour of group rollups not compacted yet (service.rollups.groups).
GROUPS_COMPACTED = "groups_compacted"
GRAINS_S = (60, 3600)
#: Prefix rollups also per day: the dashboard's top prefixes over a month read 30
#: rows per prefix and replica instead of 720.
PREFIX_GRAINS_S = (60, 3600, 86_400)
_HOUR_US = 3600 * 1_000_000


@dataclass(frozen=True)
class PassReport:
    records: int
    recomputed_from_us: int | None


def catch_up(session: Session, settings: Settings) -> PassReport:
    """Bring the rollups up to every committed record. Idempotent; one at a time.
    With ClickHouse holding the records, its own pass does (clickhouse_pass)."""
    if (ch := clickhouse_of(session)) is not None:
        from service.services import clickhouse_pass

        return clickhouse_pass.catch_up(session, settings, ch)
    repository.take_analytics_lock(session)
    chart_rollups.ensure_built(session)
    high = repository.max_usage_id(session)
    low = repository.get_cursor(session, CURSOR)
    if high <= low:
        return PassReport(0, None)
    blob = repository.get_state(session, STATE)
    state = ReuseState.from_bytes(blob) if blob else None
    profiles = profiles_for(settings)
    batch = profiles.annotate(repository.load_usage_frame(session, after_id=low, up_to_id=high))
    window_s = settings.reuse_window_s
    exact_from = exact_from_us(session, round(window_s * 1_000_000))
    if exact_from:
        # Retention deleted history before this: older late records are stored but
        # not counted (rebuilding their hour would drop what the deleted ones added).
        batch = batch.filter(pl.col("ts_us") >= exact_from)
    recompute_from: int | None
    if state is not None and state.window_us != round(window_s * 1_000_000):
        # W changed: everything still on record is recomputed under the new window.
        state, recompute_from = None, exact_from
    else:
        recompute_from = _late_from(state, batch)

    if recompute_from is None:
        tail_us = state.watermark[0] if state is not None and state.watermark else None
        results, state = compute_request_metrics(batch, window_s, state)
        add_to_rollups(
            session, batch, results, settings.group_values_kept, segments_from_us=tail_us
        )
    else:
        assert state is not None or recompute_from == exact_from
        state = _recompute(session, settings, state, recompute_from, high, profiles)

    assert state is not None
    watermark_ts = state.watermark[0] if state.watermark else 0
    repository.put_state(session, STATE, watermark_ts, state.to_bytes())
    repository.set_cursor(session, CURSOR, high, time.time_ns() // 1000)
    return PassReport(batch.height, recompute_from)


def exact_from_us(session: Session, window_us: int) -> int:
    """The first hour whose results can still be rebuilt exactly: every record from
    W before it is on record (retention deletes only before its horizon)."""
    horizon = retention_repo.get_horizon(session)
    if horizon is None:
        return 0
    if window_us >= UNBOUNDED_US:  # W made unbounded after retention ran: best effort
        window_us = 0
    return -(-(horizon + window_us) // _HOUR_US) * _HOUR_US


def _late_from(state: ReuseState | None, batch: pl.DataFrame) -> int | None:
    """The hour from which results must be rebuilt, or None for a forward pass:
    the start of the hour of the earliest late record (`earliest_late`), so whole
    rollup buckets are rebuilt."""
    earliest = earliest_late(state, batch)
    return None if earliest is None else (earliest // _HOUR_US) * _HOUR_US


def _recompute(
    session: Session,
    settings: Settings,
    state: ReuseState | None,
    from_us: int,
    high: int,
    profiles: Profiles,
) -> ReuseState:
    seeds: tuple[str, ...] = ()
    if state is None:
        plan_state, reload_from = None, None
    else:
        plan = plan_from(state, from_us)
        plan_state, reload_from, seeds = (
            state.rewind(plan),
            plan.reload_from_ts_us,
            plan.seed_sessions,
        )
    frame = repository.load_usage_frame(session, from_us=reload_from, up_to_id=high)
    if seeds and reload_from is not None:
        seed_rows = repository.load_session_seeds(session, seeds, reload_from, high)
        frame = pl.concat([seed_rows, frame]).unique("id", keep="first")
    frame = profiles.annotate(frame)
    results, new_state = compute_request_metrics(frame, settings.reuse_window_s, plan_state)
    replace_rollups_from(session, settings, from_us, frame, results)
    return new_state


def replace_rollups_from(
    session: Session,
    settings: Settings,
    from_us: int,
    records: pl.DataFrame,
    results: pl.DataFrame,
) -> None:
    """Every rollup from `from_us` (an hour) on, rebuilt from these records' results
    (those before `from_us` are only context and are left out)."""
    repository.delete_rollups_from(session, from_us)
    segments_repo.delete_segment_rollups_from(session, from_us)
    groups_repo.delete_group_rollups(session, from_us)
    compacted = repository.get_cursor(session, GROUPS_COMPACTED)
    repository.set_cursor(session, GROUPS_COMPACTED, min(compacted, from_us), _now_us())
    # The daily prefix rows are merged into like the others, so the one holding
    # from_us restarts from its hours before from_us.
    chart_rollups.rebuild_prefix_days(session, from_us)
    kept = settings.group_values_kept
    add_to_rollups(
        session, records, results.filter(pl.col("ts_us") >= from_us), kept, recompute=True
    )
    chart_rollups.rebuild_from(session, from_us)


def add_to_rollups(
    session: Session,
    records: pl.DataFrame,
    results: pl.DataFrame,
    group_values_kept: int,
    recompute: bool = False,
    segments_from_us: int | None = None,
) -> None:
    """Adds the results into the rollups (merging the tail buckets) and, for a
    forward pass, rebuilds the chart rollups from its first minute on.
    `segments_from_us`: the previous watermark, whose hour the segment rollups
    take back too (it may be over now, and be compacted)."""
    if results.is_empty():
        return
    joined = aggregate.join_results(records, results)
    first_bucket_us = int(joined["ts_us"].min())  # type: ignore[arg-type]
    tail_us = first_bucket_us if segments_from_us is None else segments_from_us
    _add_to_segment_rollups(session, joined, min(first_bucket_us, tail_us))
    first_minute = (first_bucket_us // 60_000_000) * 60_000_000
    compacted_from = _add_to_group_rollups(session, joined, first_minute, group_values_kept)
    for grain in GRAINS_S:
        grain_us = grain * 1_000_000
        start = (first_bucket_us // grain_us) * grain_us
        existing = repository.take_rollups(session, repository.ROLLUP_TABLE, grain, start)
        sums = pl.concat(
            [
                aggregate.rollup_sums(joined, grain),
                existing.select([*aggregate.ROLLUP_KEYS, *SUM_COLUMNS]),
            ],
            how="diagonal_relaxed",
        )
        counts = pl.concat(
            [aggregate.ttft_counts(joined, grain), aggregate.explode_histograms(existing)],
            how="diagonal_relaxed",
        )
        repository.insert_rollups(session, repository.ROLLUP_TABLE, aggregate.finish(sums, counts))
    for grain in PREFIX_GRAINS_S:
        grain_us = grain * 1_000_000
        start = (first_bucket_us // grain_us) * grain_us
        existing_prefix = repository.take_rollups(session, repository.PREFIX_TABLE, grain, start)
        prefix = aggregate.merge_prefix([aggregate.prefix_sums(joined, grain), existing_prefix])
        repository.insert_rollups(session, repository.PREFIX_TABLE, prefix)
    if not recompute:  # a recompute rebuilds the chart rows from its own start
        chart_rollups.rebuild_from(session, min(first_minute, compacted_from or first_minute))


def _add_to_group_rollups(
    session: Session, joined: pl.DataFrame, first_minute: int, keep: int
) -> int | None:
    """The batch's groups merged into the group rollups from its first minute on,
    then every hour before the newest record's compacted once
    (`service.rollups.groups.compact`). Returns the first hour compaction changed."""
    tail = groups_repo.take_group_rollups(session, first_minute)
    groups_repo.insert_group_rollups(session, groups.merge([tail, groups.minute_rows(joined)]))
    newest_hour = (int(joined["ts_us"].max()) // _HOUR_US) * _HOUR_US  # type: ignore[arg-type]
    first = groups_repo.first_group_bucket(
        session, repository.get_cursor(session, GROUPS_COMPACTED)
    )
    if first is None or first >= newest_hour:
        return None
    start = (first // _HOUR_US) * _HOUR_US
    rows = groups_repo.take_group_rollups(session, start, newest_hour)
    kept = groups.compact(rows, keep)
    groups_repo.insert_group_rollups(session, kept)
    repository.set_cursor(session, GROUPS_COMPACTED, newest_hour, _now_us())
    return start if kept.height < rows.height else None


def _now_us() -> int:
    return time.time_ns() // 1000


def _add_to_segment_rollups(session: Session, joined: pl.DataFrame, from_us: int) -> None:
    """The batch's static segments merged into the segment rollups from the hour of
    `from_us` on; the hours before the newest record's are over and compacted
    (`service.rollups.segments`)."""
    batch = segments.segment_sums(joined)
    start = (from_us // _HOUR_US) * _HOUR_US
    tail = segments_repo.take_segment_rollups(session, start)
    newest_hour = (int(joined["ts_us"].max()) // _HOUR_US) * _HOUR_US  # type: ignore[arg-type]
    merged = segments.compact(segments.merge([tail, batch]), newest_hour)
    segments_repo.insert_segment_rollups(session, merged)
