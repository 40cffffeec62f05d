"""Keeping the chart rollups (`service.rollups.chart`) equal to the `rollups` they
summarize.

They are derived from the stored minute `rollups`, `prefix_rollups` and
`group_rollups`, never from records, so whatever rewrote those (a forward pass
merging its tail buckets, a recompute after late records replacing everything from
an hour on, the compaction of a finished hour's groups) is followed the
same way: every chart row from the first changed minute on is deleted and rebuilt,
grain after grain (1 min from the minute rows, 5 min from 1 min, 1 h from 5 min,
1 day from 1 h). A coarse bucket straddling that minute is rebuilt whole from its
finer rows, the older of which were left untouched. Work is done a day at a time,
so a full rebuild (the first pass after the migration) holds one day in memory."""

import polars as pl
from sqlalchemy.orm import Session

from service import repository
from service.repository import groups as groups_repo
from service.repository import series as series_repo
from service.rollups import chart

MARKER = "chart_rollups"
#: Bumped when the chart rows' content changes: the next pass rebuilds them all.
VERSION = 2  # 2: the rows of groups (group_by, group_value)
_DAY_US = 86_400 * 1_000_000


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
    record, which one record from 1970 makes 20,000 days long."""
    for grain, _ in chart.CHAIN:
        start = None if from_us is None else (from_us // (grain * 1_000_000)) * grain * 1_000_000
        series_repo.delete_chart_from(session, grain, start)
    days = {(hour // _DAY_US) * _DAY_US for hour in series_repo.rollup_hours(session, from_us)}
    if from_us is not None:
        days.add((from_us // _DAY_US) * _DAY_US)
    for day in sorted(days):
        _rebuild_day(session, day, day if from_us is None else max(from_us, day))


def _rebuild_day(session: Session, day_us: int, from_us: int) -> None:
    """Chart rows of one day from `from_us` on, finest grain first. Each grain is
    merged from the rows of the grain below, which were just built from its own
    start on and are still in memory: only the older ones its first bucket also
    covers are read back (on a forward pass, a few rows of the minutes, 5 minutes
    and hours before the new data)."""
    end = day_us + _DAY_US
    built = pl.DataFrame(schema=chart.CHART_SCHEMA)
    built_from = end
    for grain, source in chart.CHAIN:
        grain_us = grain * 1_000_000
        start = (from_us // grain_us) * grain_us
        if source == 0:
            rows = chart.from_rollups(
                series_repo.load_rollups_for_chart(session, start, end),
                series_repo.load_prefix_keys_for_chart(session, start, end),
                grain,
                groups_repo.load_group_rollups(session, start, end),
            )
        else:
            older = series_repo.load_chart(session, source, start, built_from)
            rows = chart.coarsen(pl.concat([older, built]), grain)
        series_repo.insert_chart(session, rows)
        built, built_from = rows, start
