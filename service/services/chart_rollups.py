"""Keeping the chart rollups (`service.rollups.chart`) equal to the `rollups` they
summarize.

They are derived from the stored minute `rollups`, `prefix_rollups` and
`group_rollups`, never from records, so whatever rewrote those (a forward pass
merging its tail buckets, a recompute after late records replacing everything from
an hour on, the compaction of a finished hour's groups) is followed the
same way: every chart row from the first changed minute on is deleted and rebuilt,
grain after grain (1 min from the minute rows, 5 min from 1 min, 1 h from 5 min,
1 day from 1 h). A coarse bucket straddling that minute is rebuilt whole from its
finer rows, the older of which were left untouched. Work is done in batches of
whole days holding at most BATCH_HOURS hours with data (one busy day, or weeks of
sparse ones), so a full rebuild (the first pass after the migration) holds about
that much in memory."""

from collections import Counter

import polars as pl
from sqlalchemy.orm import Session

from service import repository
from service.repository import groups as groups_repo
from service.repository import series as series_repo
from service.rollups import chart
from service.timeunits import DAY_US as _DAY_US
from service.timeunits import HOUR_US as _HOUR_US

MARKER = "chart_rollups"
#: Bumped when the chart rows' content changes: the next pass rebuilds them all.
VERSION = 2  # 2: the rows of groups (group_by, group_value)
#: Hours with data per chart rebuild (`_day_batches`).
BATCH_HOURS = 48


def ensure_built(session: Session) -> bool:
    """Build every chart row once (after the migration, or when VERSION changed).
    Returns whether it did."""
    if repository.get_cursor(session, MARKER) == VERSION:
        return False
    rebuild_from(session, None)
    rebuild_prefix_days(session, None)
    repository.set_cursor(session, MARKER, VERSION, 0)
    return True


def rebuild_prefix_days(session: Session, from_us: int | None) -> None:
    """Daily `prefix_rollups` rows from the day holding `from_us` on, from the hourly
    ones (None: all). The analytics pass merges new results into daily rows like
    into the others; after a recompute deleted everything from an hour on, this
    restarts the day holding that hour from its earlier hours."""
    series_repo.rebuild_prefix_days(session, from_us)


def rebuild_from(session: Session, from_us: int | None) -> None:
    """Replace every chart row from the bucket holding `from_us` on (None: all).

    Only the days that hold data are rebuilt (plus the one holding `from_us`, whose
    coarse buckets were deleted and are rebuilt from their older finer rows): the
    work follows the data, not the span of time between its oldest and newest
    record, which one record from 1970 makes 20,000 days long. Days go in batches
    (`_day_batches`): 2,000 sparse days are a few dozen rebuilds, not 2,000."""
    for grain, _ in chart.CHAIN:
        start = None if from_us is None else (from_us // (grain * 1_000_000)) * grain * 1_000_000
        series_repo.delete_chart_from(session, grain, start)
    hours = series_repo.rollup_hours(session, from_us)
    if from_us is not None:
        hours.append((from_us // _HOUR_US) * _HOUR_US)
    for first_day, end in _day_batches(hours):
        _rebuild(session, first_day if from_us is None else max(from_us, first_day), end)


def _day_batches(hours: list[int]) -> list[tuple[int, int]]:
    """Whole days [first, end) covering the hours with data, cut between days once a
    batch holds BATCH_HOURS hours with data: each rebuild holds about that much in
    memory, and its fixed cost is shared by the sparse days it covers."""
    per_day = Counter((hour // _DAY_US) * _DAY_US for hour in hours)
    batches: list[tuple[int, int]] = []
    count = 0
    for day in sorted(per_day):
        if batches and count + per_day[day] <= BATCH_HOURS:
            batches[-1] = (batches[-1][0], day + _DAY_US)
            count += per_day[day]
        else:
            batches.append((day, day + _DAY_US))
            count = per_day[day]
    return batches


def rebuild_between(session: Session, from_us: int, to_us: int) -> None:
    """Replace every chart row of a bucket that overlaps [from_us, to_us) (hours):
    the span a late record made the pass rebuild. The rows of later buckets are
    left alone; a day straddling the span is rebuilt whole from its hours, the
    ones outside the span read back as they are."""
    for grain, _ in chart.CHAIN:
        grain_us = grain * 1_000_000
        start = (from_us // grain_us) * grain_us
        series_repo.delete_chart_from(session, grain, start, -(-to_us // grain_us) * grain_us)
    _rebuild(session, from_us, -(-to_us // _DAY_US) * _DAY_US, to_us)


def _rebuild(session: Session, from_us: int, end_us: int, to_us: int | None = None) -> None:
    """Chart rows from `from_us` on, up to `to_us` (else `end_us`, a day boundary)
    for the grains finer than a day, whole days up to `end_us` for the day grain;
    finest grain first. Each grain is merged from the rows of the grain below, which
    were just built over its own span and are still in memory: only the older (and,
    with `to_us`, newer) ones its first and last buckets also cover are read back
    (on a forward pass, a few rows of the minutes, 5 minutes and hours before the
    new data)."""
    end = end_us
    built = pl.DataFrame(schema=chart.CHART_SCHEMA)
    built_from, built_to = end, end
    for grain, source in chart.CHAIN:
        grain_us = grain * 1_000_000
        start = (from_us // grain_us) * grain_us
        stop = end if to_us is None else min(end, -(-to_us // grain_us) * grain_us)
        if source == 0:
            rows = chart.from_rollups(
                series_repo.load_rollups_for_chart(session, start, stop),
                series_repo.load_prefix_keys_for_chart(session, start, stop),
                grain,
                groups_repo.load_group_rollups(session, start, stop),
            )
        else:
            parts = [series_repo.load_chart(session, source, start, built_from), built]
            if built_to < stop:
                parts.append(series_repo.load_chart(session, source, built_to, stop))
            rows = chart.coarsen(pl.concat(parts), grain)
        series_repo.insert_chart(session, rows)
        built, built_from, built_to = rows, start, stop
