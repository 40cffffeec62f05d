"""The incremental analytics pass: records committed since the cursor -> per-request
values (`service.analytics`) -> rollups.

Steps: the pass takes the new records in steps of at most `analytics_step_records`
(by arrival id); each step computes its records and writes their rollups, the
state and the cursor together, so the background job commits each step on its own
(`service.worker`) and a crash between steps leaves a pass that the next one
continues exactly. On SQLite a step holds the write lock for a second or two,
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

import numpy as np
import polars as pl
from sqlalchemy.orm import Session

from service import repository
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
from service.services import chart_rollups, clickhouse_pass, rollup_writes
from service.services.pass_state import CURSOR, STATE, PassReport, exact_from_us
from service.settings import Settings
from service.timeunits import DAY_US as _DAY_US
from service.timeunits import HOUR_US as _HOUR_US
from service.timeunits import MINUTE_US


def catch_up(session: Session, settings: Settings) -> PassReport:
    """Bring the rollups up to every committed record, in the caller's transaction
    (step after step, `catch_up_step`). Idempotent; one at a time. With ClickHouse
    holding the records, its own pass does (clickhouse_pass)."""
    if (ch := clickhouse_of(session)) is not None:
        return clickhouse_pass.catch_up(session, settings, ch)
    # One transaction: a cut by minutes would commit nothing sooner, and each step
    # whose records are older than the step before's rebuilds the recent tail again
    # (a shuffled backlog: 120 steps for 12 passes). The cut by records stays: it
    # bounds the memory of a long backlog.
    report = catch_up_step(session, settings, by_minutes=False)
    while report.more:
        report = report.plus(catch_up_step(session, settings, report.until_id, by_minutes=False))
    return report


def catch_up_step(
    session: Session, settings: Settings, until_id: int | None = None, *, by_minutes: bool = True
) -> PassReport:
    """One step of the pass: the next `analytics_step_records` records after the
    cursor (with `by_minutes`, fewer when they touch over `analytics_step_minutes`
    minutes, `step_cut`), their rollups, the state and the cursor, all written in the
    caller's transaction, which a job commits before the next step (`more` says
    whether records committed before this step began, or up to `until_id`, are
    left)."""
    if (ch := clickhouse_of(session)) is not None:
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
    cut = step_cut(batch, state, settings.analytics_step_minutes) if by_minutes else None
    if cut is not None:
        batch, high = batch.filter(pl.col("id") <= cut), cut
    batch = profiles.annotate(batch)
    window_us = round(settings.reuse_window_s * 1_000_000)
    exact_from = exact_from_us(session, window_us)
    if exact_from is not None:
        # Retention deleted history before this: older late records are stored but
        # not counted (rebuilding their hour would drop what the deleted ones added).
        batch = batch.filter(pl.col("ts_us") >= exact_from)
    recompute_from: int | None
    if state is not None and state.window_us != window_us:
        # W changed: everything still on record is recomputed under the new window
        # (from 0 without a horizon: buckets before 1970 keep the old W's values).
        recompute_from = 0 if exact_from is None else exact_from
        state = _recompute(session, settings, None, recompute_from, high, profiles)
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
    a million in a few. So, in arrival order, each new record counts the minutes it
    adds to what the step writes: a forward record its minute if new; a late
    record the hours its span adds to the union of the step's late spans
    (`_late_minutes`). The step ends before the record that exceeds the budget (at
    least one record is taken)."""
    if batch.height <= 1:
        return None
    by_id = batch.select("id", "ts_us").sort("id")
    ids, ts = by_id["id"].to_numpy(), by_id["ts_us"].to_numpy()
    late = np.zeros(len(ts), dtype=np.bool_)
    if state is not None and state.watermark is not None:
        late = late_mask(state, ts, ids)
    minute = np.where(late, -1, ts // MINUTE_US)
    _, first = np.unique(minute, return_index=True)
    opens = np.zeros(len(ts), dtype=np.int64)
    opens[first] = 1
    opens[late] = 0
    cost = np.cumsum(opens)
    if late.any():
        assert state is not None and state.watermark is not None
        cost += _late_minutes(ts, late, min(state.window_us, UNBOUNDED_US), state.watermark[0])
    over = np.flatnonzero(cost > max_minutes)
    if not len(over):
        return None
    return int(ids[max(int(over[0]), 1) - 1])


def _late_minutes(ts: np.ndarray, late: np.ndarray, window_us: int, watermark: int) -> np.ndarray:
    """For each prefix of the records (in arrival order), the minutes the pass
    rebuilds for its late ones (`_take_batch`), in whole hours: the union of their
    spans, each from its hour to the hour after ts + W, where a span reaching the
    watermark's hour runs to it (one rebuild from the earliest such hour). Each
    hour is added once: linear in the records and the hours covered."""
    hour, ends = ts // _HOUR_US, (ts + window_us) // _HOUR_US + 1
    tail_hour = watermark // _HOUR_US
    tail_from = tail_hour + 1  # the tail rebuild's first hour (none yet)
    covered: set[int] = set()
    at: list[int] = []  # where the union grows, and to how many hours
    sizes: list[int] = []
    hours, first = np.unique(np.where(late, hour, -1), return_index=True)
    for h, i in sorted(zip(hours.tolist(), first.tolist(), strict=True), key=lambda p: p[1]):
        if h < 0:
            continue
        end = int(ends[i])
        if end > tail_hour:  # to the tail: only the hours below the last such start
            end, tail_from = tail_from, min(tail_from, h)
        covered.update(range(h, end))
        at.append(i)
        sizes.append(len(covered))
    step = np.searchsorted(np.asarray(at, dtype=np.int64), np.arange(len(ts)), side="right") - 1
    return np.where(step >= 0, np.asarray([0, *sizes], dtype=np.int64)[step + 1] * 60, 0)


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
        rollup_writes.add_to_rollups(
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
    rollup_writes.add_to_rollups(
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
    rollup_writes.replace_span(session, settings, from_us, to_us, frame, results)


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
    rollup_writes.replace_rollups_from(session, settings, from_us, frame, results)
    return new_state
