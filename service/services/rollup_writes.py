"""The analytics pass's writes (`service.services.analytics_pass`): per-request
results added into the rollups (the tail buckets merged), or a range of hours
replaced by its rebuilt results; each writes the request rollups at every grain,
the prefix, segment and group rollups (capped per hour from the first write:
`service.rollups.groups`, `service.rollups.segments`) and the chart rows derived
from them (`service.services.chart_rollups`)."""

import time

import polars as pl
from sqlalchemy.orm import Session

from service import repository
from service.analytics.definitions import SUM_COLUMNS
from service.repository import analytics as analytics_repo
from service.repository import diagnoses as diagnoses_repo
from service.repository import groups as groups_repo
from service.repository import segments as segments_repo
from service.repository import series as series_repo
from service.rollups import aggregate, diagnoses, groups, segments
from service.services import chart_rollups
from service.settings import Settings
from service.timeunits import HOUR_US as _HOUR_US

#: The first hour of group rollups not compacted yet (service.rollups.groups).
GROUPS_COMPACTED = "groups_compacted"
GRAINS_S = (60, 3600)
#: Prefix rollups also per day: the dashboard's top prefixes over a month read 30
#: rows per prefix and replica instead of 720.
PREFIX_GRAINS_S = (60, 3600, 86_400)


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
    diagnoses_repo.delete_diagnosis_rollups(session, from_us)
    # Rebuilt rows keep each hour's busiest values (`add_to_rollups` ranks whole
    # hours): nothing of them is left for the compaction of older rows.
    groups_repo.delete_group_rollups(session, from_us)
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
    diagnoses_repo.delete_diagnosis_rollups(session, from_us, to_us)
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
        diagnoses_repo.insert_diagnosis_rollups(session, diagnoses.diagnosis_sums(joined))
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
    _add_to_diagnosis_rollups(session, joined, first_bucket_us)
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


def _add_to_diagnosis_rollups(session: Session, joined: pl.DataFrame, from_us: int) -> None:
    """The batch's diagnosed requests merged into the diagnosis rollups from the
    hour of `from_us` on (`service.rollups.diagnoses`); nothing is read or written
    for a batch without one."""
    batch = diagnoses.diagnosis_sums(joined)
    if batch.is_empty():
        return
    start = (from_us // _HOUR_US) * _HOUR_US
    tail = diagnoses_repo.take_diagnosis_rollups(session, start)
    diagnoses_repo.insert_diagnosis_rollups(session, diagnoses.merge([tail, batch]))
