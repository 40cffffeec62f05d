"""The incremental analytics pass: records committed since the cursor -> per-request
values (`service.analytics`) -> rollups.

Steps: the pass takes the new records in steps of at most `analytics_step_records`
(by arrival id); each step computes its records and writes their rollups, the
state and the cursor together, so the background job commits each step on its own
(`service.worker`) and a crash between steps leaves a pass that the next one
continues exactly. On SQLite a step holds the write lock for well under a second,
so ingestion never waits out a whole pass. `catch_up` runs the steps in the
caller's transaction (a read's catch-up, detection, the tests).

Forward case: the new records all sort after the state's watermark; they are
computed with the saved state and added into the rollups (only the tail buckets
already exist, and those are merged).

Late records (a `ts` before the watermark, e.g. one shipper lagging behind
another) cost the hours they can change (`service.analytics.state`, "What a late
record can change"): from each one's hour to the hour after ts + W, and the hour of
its session's next request. Each such span that ends before the watermark's hour
is rebuilt alone: its records and W before them reloaded, their sessions seeded,
its rollups, prefix, segment and group rollups and chart rows replaced, every other
hour left as it is; the state only takes the late records' sessions. A span that
reaches the watermark's hour is rebuilt with everything after it, as before: the
records from W before it reloaded, the state rewound (`plan_from`/`rewind`), every
rollup from that hour on replaced. A full rebuild from the earliest late hour is
kept for an unbounded W (a record then matters forever), and everything is
recomputed when W changed. Either way exact: the rollups equal one pass over the
same records.

Each record is read with its caching profile (`service.profiles`: the models file
in force when the pass runs, then the built-ins): its minimum and TTL decide the
`below_minimum` and `expiry` causes, its prices the dollars. Results already in the
rollups keep the profile they were computed with; a changed models file applies
from the next records on (and to any hour a late record makes the pass rebuild).
docs/providers.md says so to users."""

import time
from dataclasses import dataclass, field

import numpy as np
import polars as pl
from sqlalchemy.orm import Session

from service import repository
from service.analytics.definitions import SUM_COLUMNS
from service.analytics.requests import compute_request_metrics
from service.analytics.state import (
    UNBOUNDED_US,
    ReuseState,
    earliest_late,
    late_mask,
    late_spans,
    plan_from,
)
from service.clickhouse import clickhouse_of
from service.profiles import Profiles, profiles_for
from service.repository import analytics as analytics_repo
from service.repository import groups as groups_repo
from service.repository import retention as retention_repo
from service.repository import segments as segments_repo
from service.repository import series as series_repo
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
#: `catch_up` (one transaction) cuts its steps by records only.
_NO_MINUTE_CUT = 2**62
_DAY_US = 24 * _HOUR_US


@dataclass(frozen=True)
class PassReport:
    records: int
    #: The first hour whose rollups were rebuilt (None: only forward records).
    recomputed_from_us: int | None
    #: Records committed before the step began (up to `until_id`) are left for
    #: another step.
    more: bool = False
    #: The highest id the step aimed at: pass it as the next step's `until_id` to
    #: stop at the records committed before the first step began.
    until_id: int = field(default=0, compare=False)

    def plus(self, step: "PassReport") -> "PassReport":
        """This report followed by the next step's: records added, the earliest
        rebuilt hour, and whether that step left more."""
        rebuilt = [h for h in (self.recomputed_from_us, step.recomputed_from_us) if h is not None]
        return PassReport(
            self.records + step.records, min(rebuilt, default=None), step.more, step.until_id
        )


def catch_up(session: Session, settings: Settings) -> PassReport:
    """Bring the rollups up to every committed record, in the caller's transaction
    (step after step, `catch_up_step`). Idempotent; one at a time. With ClickHouse
    holding the records, its own pass does (clickhouse_pass)."""
    if (ch := clickhouse_of(session)) is not None:
        from service.services import clickhouse_pass

        return clickhouse_pass.catch_up(session, settings, ch)
    # One transaction: a cut by minutes would commit nothing sooner, and each step
    # whose records are older than the step before's rebuilds the recent tail again
    # (a shuffled backlog: 120 steps for 12 passes). The cut by records stays: it
    # bounds the memory of a long backlog.
    whole = settings.model_copy(update={"analytics_step_minutes": _NO_MINUTE_CUT})
    report = catch_up_step(session, whole)
    while report.more:
        report = report.plus(catch_up_step(session, whole, report.until_id))
    return report


def catch_up_step(session: Session, settings: Settings, until_id: int | None = None) -> PassReport:
    """One step of the pass: the next `analytics_step_records` records after the
    cursor (fewer when they touch over `analytics_step_minutes` minutes,
    `step_cut`), their rollups, the state and the cursor, all written in the
    caller's transaction, which a job commits before the next step (`more` says
    whether records committed before this step began, or up to `until_id`, are
    left)."""
    if (ch := clickhouse_of(session)) is not None:
        from service.services import clickhouse_pass

        return clickhouse_pass.catch_up(session, settings, ch)
    repository.take_analytics_lock(session)
    chart_rollups.ensure_built(session)
    newest = repository.max_usage_id(session)
    if until_id is not None:
        newest = min(newest, until_id)
    low = repository.get_cursor(session, CURSOR)
    if newest <= low:
        return PassReport(0, None, until_id=newest)
    high = analytics_repo.step_high_id(session, low, newest, settings.analytics_step_records)
    blob = repository.get_state(session, STATE)
    state = ReuseState.from_bytes(blob) if blob else None
    profiles = profiles_for(settings)
    batch = repository.load_usage_frame(session, after_id=low, up_to_id=high)
    cut = step_cut(batch, state, settings.analytics_step_minutes)
    if cut is not None:
        batch, high = batch.filter(pl.col("id") <= cut), cut
    batch = profiles.annotate(batch)
    window_us = round(settings.reuse_window_s * 1_000_000)
    exact_from = exact_from_us(session, window_us)
    if exact_from:
        # Retention deleted history before this: older late records are stored but
        # not counted (rebuilding their hour would drop what the deleted ones added).
        batch = batch.filter(pl.col("ts_us") >= exact_from)
    recompute_from: int | None
    if state is not None and state.window_us != window_us:
        # W changed: everything still on record is recomputed under the new window.
        recompute_from = exact_from
        state = _recompute(session, settings, None, exact_from, high, profiles)
    else:
        state, recompute_from = _take_batch(session, settings, state, batch, high, profiles)
    watermark_ts = state.watermark[0] if state.watermark else 0
    repository.put_state(session, STATE, watermark_ts, state.to_bytes())
    repository.set_cursor(session, CURSOR, high, time.time_ns() // 1000)
    return PassReport(batch.height, recompute_from, more=high < newest, until_id=newest)


def step_cut(batch: pl.DataFrame, state: ReuseState | None, max_minutes: int) -> int | None:
    """The last id of this step when the batch holds more work than `max_minutes`
    (None: take it all). The work of a step follows the rollup buckets it writes
    more than its records: 5,000 records on 5,000 distinct minutes cost as much as
    a million in a few. So, in arrival order, each record opening a new minute
    counts one, and each late record opening a new hour counts that hour and W
    (the span it makes the pass rebuild), until the budget is spent; the step
    ends before the record that exceeds it (at least one record is taken)."""
    if batch.height <= 1:
        return None
    by_id = batch.select("id", "ts_us").sort("id")
    ids, ts = by_id["id"].to_numpy(), by_id["ts_us"].to_numpy()
    minute = ts // 60_000_000
    key, weight = minute, np.ones(len(ts), dtype=np.int64)
    if state is not None and state.watermark is not None:
        late = late_mask(state, ts, ids)
        span_minutes = 60 + min(state.window_us, UNBOUNDED_US) // 60_000_000
        # A late hour's key cannot equal a minute's: minutes are counted from 0 up.
        key = np.where(late, -(ts // _HOUR_US) - 1, minute)
        weight = np.where(late, span_minutes, 1)
    _, first = np.unique(key, return_index=True)
    opens = np.zeros(len(ts), dtype=np.int64)
    opens[first] = weight[first]
    over = np.flatnonzero(np.cumsum(opens) > max_minutes)
    if not len(over):
        return None
    return int(ids[max(int(over[0]), 1) - 1])


def _take_batch(
    session: Session,
    settings: Settings,
    state: ReuseState | None,
    batch: pl.DataFrame,
    high: int,
    profiles: Profiles,
) -> tuple[ReuseState, int | None]:
    """The batch's records into the rollups: the forward ones added, the late ones
    rebuilding the spans they can change (module docstring). Returns the new state
    and the first rebuilt hour (None: nothing late)."""
    earliest = earliest_late(state, batch)
    if earliest is None:
        tail_us = state.watermark[0] if state is not None and state.watermark else None
        results, new_state = compute_request_metrics(batch, settings.reuse_window_s, state)
        add_to_rollups(
            session, batch, results, settings.group_values_kept, segments_from_us=tail_us
        )
        return new_state, None
    assert state is not None and state.watermark is not None  # a late record needs one
    if state.unbounded:  # every later result may differ: rebuild from the late hour on
        from_us = (earliest // _HOUR_US) * _HOUR_US
        return _recompute(session, settings, state, from_us, high, profiles), from_us
    late = batch.filter(
        pl.Series(late_mask(state, batch["ts_us"].to_numpy(), batch["id"].to_numpy()))
    )
    spans = late_spans(
        late["ts_us"].to_list(),
        _far_successors(session, state, late, high),
        state.window_us,
        _HOUR_US,
    )
    watermark_ts = state.watermark[0]
    tail_hour = (watermark_ts // _HOUR_US) * _HOUR_US
    state = state.with_late_sessions(late)
    for start, end in spans:
        if end > tail_hour:  # reaches the watermark's hour: rebuilt with what follows
            return _recompute(session, settings, state, start, high, profiles), spans[0][0]
        for piece in range(start, end, _DAY_US):  # a day at a time: bounded memory
            _rebuild_span(session, settings, piece, min(piece + _DAY_US, end), high, profiles)
    forward = batch.filter(~pl.col("id").is_in(late["id"].implode()))
    results, new_state = compute_request_metrics(forward, settings.reuse_window_s, state)
    add_to_rollups(
        session, forward, results, settings.group_values_kept, segments_from_us=watermark_ts
    )
    return new_state, spans[0][0]


def _far_successors(
    session: Session, state: ReuseState, late: pl.DataFrame, high: int
) -> list[int]:
    """The ts of each late record's next session request when it falls after ts + W
    (nearer ones are in the record's own span). Only sessions remembered after
    ts + W are looked up: for the others every later request is within W."""
    rows = late.filter(pl.col("session_id").is_not_null()).join(
        state.sessions.select("session_id", pl.col("ts_us").alias("last_us")), on="session_id"
    )
    rows = rows.filter(pl.col("last_us") > pl.col("ts_us") + state.window_us)
    found = []
    for session_id, ts_us, record_id in rows.select("session_id", "ts_us", "id").iter_rows():
        successor = analytics_repo.session_successor_ts(session, session_id, ts_us, record_id, high)
        if successor is not None and successor > ts_us + state.window_us:
            found.append(successor)
    return found


def _rebuild_span(
    session: Session,
    settings: Settings,
    from_us: int,
    to_us: int,
    high: int,
    profiles: Profiles,
) -> None:
    """The results of the hours [from_us, to_us) recomputed from their records, W of
    records before them and their sessions' previous requests (exact, see
    `service.analytics.state`), and every rollup of those hours replaced."""
    window_us = round(settings.reuse_window_s * 1_000_000)
    reload_from = from_us - window_us
    frame = repository.load_usage_frame(session, from_us=reload_from, to_us=to_us, up_to_id=high)
    sessions = frame["session_id"].drop_nulls().unique().sort().to_list()
    if sessions:
        seeds = repository.load_session_seeds(session, sessions, reload_from, high)
        frame = pl.concat([seeds, frame]).unique("id", keep="first")
    frame = profiles.annotate(frame)
    results, _ = compute_request_metrics(frame, settings.reuse_window_s, None)
    results = results.filter(pl.col("ts_us") >= from_us)
    replace_span(session, settings, from_us, to_us, frame, results)


def exact_from_us(session: Session, window_us: int) -> int:
    """The first hour whose results can still be rebuilt exactly: every record from
    W before it is on record (retention deletes only before its horizon)."""
    horizon = retention_repo.get_horizon(session)
    if horizon is None:
        return 0
    if window_us >= UNBOUNDED_US:  # W made unbounded after retention ran: best effort
        window_us = 0
    return -(-(horizon + window_us) // _HOUR_US) * _HOUR_US


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


def replace_span(
    session: Session,
    settings: Settings,
    from_us: int,
    to_us: int,
    records: pl.DataFrame,
    results: pl.DataFrame,
) -> None:
    """Every rollup of the hours [from_us, to_us), which end before the watermark's
    hour, rebuilt from these results (of requests in the span; `records` may hold
    more). Nothing is merged: the span is written whole, as one pass writes it (its
    group rollups keep each hour's busiest values, `groups.whole_hours_rows`); the
    daily prefix rows and chart rows overlapping the span are rebuilt from their
    finer rows."""
    analytics_repo.delete_span_rollups(session, from_us, to_us)
    groups_repo.delete_group_rollups(session, from_us, to_us)
    if not results.is_empty():
        joined = aggregate.join_results(records, results)
        for grain in GRAINS_S:
            rows = aggregate.finish(
                aggregate.rollup_sums(joined, grain), aggregate.ttft_counts(joined, grain)
            )
            repository.insert_rollups(session, repository.ROLLUP_TABLE, rows)
        for grain in PREFIX_GRAINS_S[:-1]:  # the days straddle the span: rebuilt below
            prefix = aggregate.merge_prefix([aggregate.prefix_sums(joined, grain)])
            repository.insert_rollups(session, repository.PREFIX_TABLE, prefix)
        segment_rows = segments.compact(segments.segment_sums(joined), to_us)
        segments_repo.insert_segment_rollups(session, segment_rows)
        group_rows = groups.whole_hours_rows(joined, settings.group_values_kept)
        groups_repo.insert_group_rollups(session, group_rows)
    series_repo.rebuild_prefix_days(session, from_us, to_us)
    chart_rollups.rebuild_between(session, from_us, to_us)


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
    each hour holding at most `keep` values per field from the first write: the
    batch's values ranked with those its hours keep, the rest folded into
    `groups.OTHER` (`service.rollups.groups`), a value that falls out moved there
    from its first minute. Then the hours before the newest record's that still hold
    more (written before the cap) are folded once. Returns the first minute before
    `first_minute` whose rows changed, or None."""
    first_hour = (first_minute // _HOUR_US) * _HOUR_US
    stored = groups_repo.group_tokens(session, first_hour)
    batch = groups.per_group(joined)
    kept = groups.choose(groups.hour_tokens(stored), groups.hour_tokens(batch), keep)
    moved = groups.evicted_from(stored, kept)
    start = first_minute if moved is None else min(first_minute, moved)
    tail = groups.fold(groups_repo.take_group_rollups(session, start), kept)
    groups_repo.insert_group_rollups(session, groups.merge([tail, groups.rows_of(batch, kept)]))
    newest_hour = (int(joined["ts_us"].max()) // _HOUR_US) * _HOUR_US  # type: ignore[arg-type]
    compacted = _compact_groups(session, newest_hour, keep)
    changed = [m for m in (moved, compacted) if m is not None and m < first_minute]
    return min(changed) if changed else None


def _compact_groups(session: Session, newest_hour: int, keep: int) -> int | None:
    """The hours from the compaction cursor to `newest_hour` with more than `keep`
    values of a field (rows written before the cap applied from the first write)
    folded (`service.rollups.groups.compact`); the cursor moved to `newest_hour`.
    Only the rows' keys and tokens are read unless there is something to fold.
    Returns the first hour that changed."""
    from_us = repository.get_cursor(session, GROUPS_COMPACTED)
    if from_us >= newest_hour:
        return None
    repository.set_cursor(session, GROUPS_COMPACTED, newest_hour, _now_us())
    tokens = groups.hour_tokens(groups_repo.group_tokens(session, from_us, newest_hour))
    counts = tokens.group_by(groups.CHOICE_KEYS).len().filter(pl.col("len") > keep)
    if counts.is_empty():
        return None
    start = int(counts["hour_us"].min())  # type: ignore[arg-type]
    rows = groups_repo.take_group_rollups(session, start, newest_hour)
    groups_repo.insert_group_rollups(session, groups.compact(rows, keep))
    return start


def _now_us() -> int:
    return time.time_ns() // 1000


def _add_to_segment_rollups(session: Session, joined: pl.DataFrame, from_us: int) -> None:
    """The batch's static segments merged into the segment rollups from the hour of
    `from_us` on, names and scenarios capped from the first write; the hours before
    the newest record's are over and compacted (`service.rollups.segments`)."""
    batch = segments.segment_sums(joined)
    start = (from_us // _HOUR_US) * _HOUR_US
    tail = segments_repo.take_segment_rollups(session, start)
    newest_hour = (int(joined["ts_us"].max()) // _HOUR_US) * _HOUR_US  # type: ignore[arg-type]
    merged = segments.compact(segments.capped(tail, batch), newest_hour)
    segments_repo.insert_segment_rollups(session, merged)
