"""The analytics pass of a ClickHouse deployment: the same rollups as
`analytics_pass`, from records ClickHouse holds, computed by SQL there
(service.clickhouse.analytics).

It follows the relational pass's plan, with ids from ClickHouse:

* the cursor is the highest id read, kept under the relational pass's own cursor
  name, so retention and health read it as they always have. It is read as the
  relational pass reads its own: after waiting out every ingest transaction in
  flight (`ingest_quiesced`: on PostgreSQL each holds the ingest lock shared
  until its ClickHouse insert is written), and no higher than the records
  received `clickhouse_visibility_lag_s` ago (`visible_high_id`), so an insert
  that starts later, on any API host whose clock is within the lag, takes a
  higher id;
* a forward pass (every new record after the watermark, the newest (ts, id)
  computed) computes the new records only, each once, and merges their sums into
  the tail buckets;
* late records rebuild from the hour of the earliest one, as `analytics_pass`
  does: the SQL reads W before that hour itself, so no state is kept but the
  watermark;
* a changed W rebuilds everything still on record.

The per-request results are written to ClickHouse's `request_results` (the
latest pass's row of a request is the one that counts) and the rollups to the
relational database, in the caller's transaction.
"""

from __future__ import annotations

import time
from dataclasses import replace

import orjson
import polars as pl
from sqlalchemy.orm import Session

from service import repository
from service.analytics._arrays import UNBOUNDED_US, window_us
from service.clickhouse import analytics as ch_analytics
from service.clickhouse import records as ch_records
from service.clickhouse.client import ClickHouse
from service.clickhouse.derive import derive
from service.clickhouse.pass_sql import Scope
from service.profiles import profiles_for
from service.repository.locks import ingest_quiesced
from service.services import chart_rollups
from service.services.pass_state import CURSOR, STATE, PassReport, exact_from_us
from service.services.rollup_writes import add_to_rollups, replace_rollups_from
from service.settings import Settings
from service.timeunits import HOUR_US as _HOUR_US


def catch_up(session: Session, settings: Settings, ch: ClickHouse) -> PassReport:
    """Bring the rollups up to every visible record. Idempotent; one at a time."""
    repository.take_analytics_lock(session)
    chart_rollups.ensure_built(session)
    low = repository.get_cursor(session, CURSOR)
    with ingest_quiesced(session):  # every insert in flight has finished
        high = max(low, ch_records.visible_high_id(ch, settings.clickhouse_visibility_lag_s))
    w_us = window_us(settings.reuse_window_s)
    mark_window, mark = _watermark(session)
    exact = exact_from_us(session, w_us)
    exact_from = -UNBOUNDED_US if exact is None else exact  # None: every record
    new = ch_records.new_records(ch, low, high, mark)
    if new.n == 0:  # nothing in (low, high]: nothing to derive either
        repository.set_cursor(session, CURSOR, high, time.time_ns() // 1000)
        return PassReport(0, None)
    derive(ch, low, high)  # before the cursor moves past them: service.clickhouse.derive
    if mark_window is not None and mark_window != w_us:
        rebuild_from: int | None = exact_from  # W changed: everything on record
    else:
        rebuild_from = _late_hour(new.first_late_ts, exact_from)
    whole = Scope(
        rebuild_from if rebuild_from is not None else max(new.first_ts, exact_from),
        high,
        w_us,
        after_id=low if rebuild_from is None else None,
    )
    _compute_in_steps(session, settings, ch, whole, rebuild_from, mark)
    mark = new.newest if mark is None else max(mark, new.newest)
    _save_watermark(session, w_us, mark)
    repository.set_cursor(session, CURSOR, high, time.time_ns() // 1000)
    return PassReport(new.n, rebuild_from)


def _compute_in_steps(
    session: Session,
    settings: Settings,
    ch: ClickHouse,
    whole: Scope,
    rebuild_from: int | None,
    mark: tuple[int, int] | None,
) -> None:
    """Compute `whole` in steps of whole hours holding at most
    `clickhouse_pass_step_records` records (an hour with more is a step alone), so
    a backlog of months needs the memory of one step, on ClickHouse and here.
    Each step looks back W from its own start, at records the steps before it
    computed; the first rebuilds the rollups from `rebuild_from` (a late record, a
    changed W), the others add to them as a forward pass does."""
    annotate = profiles_for(settings).annotate
    firsts, counts = ch_records.hour_counts(ch, whole.computed())
    tail_us = mark[0] if mark is not None else None
    for n, (from_us, to_us) in enumerate(
        step_bounds(firsts, counts, whole.from_us, settings.clickhouse_pass_step_records)
    ):
        scope = replace(whole, from_us=from_us, to_us=to_us)
        records, results = ch_analytics.compute(
            ch, scope, settings.clickhouse_pass_shards, annotate
        )
        _store_results(ch, results)
        if n == 0 and rebuild_from is not None:
            replace_rollups_from(session, settings, rebuild_from, records, results)
        else:
            add_to_rollups(
                session, records, results, settings.group_values_kept, segments_from_us=tail_us
            )
        if not records.is_empty():
            tail_us = int(records["ts_us"].max())  # type: ignore[arg-type]


def step_bounds(
    firsts: list[int], counts: list[int], from_us: int, max_records: int
) -> list[tuple[int, int | None]]:
    """[from, to) of each step (the last one open): consecutive hours (their first
    ts `firsts`, their record `counts`) while their total stays within
    `max_records`. The first step starts at `from_us`, each next one at its first
    hour's first ts, so every record falls in exactly one."""
    starts = [from_us]
    held = 0
    for first, count in zip(firsts, counts, strict=True):
        if held and held + count > max_records:
            starts.append(first)
            held = 0
        held += count
    return [(a, b) for a, b in zip(starts, [*starts[1:], None], strict=True)]


def _late_hour(first_late_ts: int | None, exact_from: int) -> int | None:
    """The hour to rebuild from: that of the earliest late record, never before
    what can be rebuilt exactly; None for a forward pass."""
    if first_late_ts is None:
        return None
    return max((first_late_ts // _HOUR_US) * _HOUR_US, exact_from)


def _store_results(ch: ClickHouse, results: pl.DataFrame) -> None:
    version = time.time_ns() // 1000
    ch.insert(
        "request_results",
        results.with_columns(pl.lit(version, pl.UInt64).alias("version")).with_columns(
            pl.col(pl.Boolean).cast(pl.UInt8)
        ),
    )


def _watermark(session: Session) -> tuple[int | None, tuple[int, int] | None]:
    """(W the results were computed with, the newest (ts, id) computed)."""
    blob = repository.get_state(session, STATE)
    if not blob:
        return None, None
    saved = orjson.loads(blob)
    mark = saved.get("mark")
    return saved.get("window_us"), (int(mark[0]), int(mark[1])) if mark else None


def _save_watermark(session: Session, w_us: int, mark: tuple[int, int] | None) -> None:
    blob = orjson.dumps({"window_us": w_us, "mark": list(mark) if mark else None})
    repository.put_state(session, STATE, mark[0] if mark else 0, blob)
