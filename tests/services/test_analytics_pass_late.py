"""services.analytics_pass with history: late records cost the hours they can
change (`service.analytics.state`, "What a late record can change"), not every
later hour, and the pass goes in steps; either way every rollup (minute, hour and
day, prefix, segment, group and chart rows) and the saved state equal one pass over
the same records, run from scratch."""

import math
import random
from typing import Any

import polars as pl
import pytest
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from service import repository
from service.analytics.state import ReuseState
from service.models import (
    AnalyticsCursor,
    AnalyticsState,
    ChartRollup,
    GroupRollup,
    PrefixRollup,
    Rollup,
    SegmentRollup,
)
from service.rollups import histogram
from service.services import analytics_pass
from service.services.analytics_pass import catch_up, catch_up_step
from service.settings import Settings
from tests.services.test_analytics_pass import assert_rollups_equal_one_pass
from tests.services.traffic import T0, US, rec, store

HOUR_US = 3600 * US
TABLES: dict[str, Any] = {
    "rollups": Rollup,
    "prefix": PrefixRollup,
    "chart": ChartRollup,
    "segments": SegmentRollup,
    "groups": GroupRollup,
}


def history(n: int, hours: int, seed: int, prefix: str = "h") -> list[dict[str, Any]]:
    """Requests over `hours` hours: shared prefixes on two replicas, tenants and
    scenarios, sessions that come back hours later (so a late record's session
    successor can be far), static segments."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        p = rng.randrange(5)
        blocks = [p, 10 + p * 10 + rng.randrange(3), 1000 + i] if rng.random() < 0.9 else None
        out.append(
            rec(
                f"{prefix}{seed}-{i}",
                T0 + rng.uniform(0, hours * 3600),
                blocks,
                cached_tokens=rng.choice([0, 100, 200]),
                replica=rng.choice(["a", "b", None]),
                deploy=rng.choice(["v1", "v2"]),
                ttft_ms=rng.uniform(50, 900),
                session_id=rng.choice([None, f"s{rng.randrange(8)}"]),
                tenant=rng.choice(["t1", "t2"]),
                scenario=rng.choice([None, "chat", "search"]),
                segments=[{"name": "system", "hash": f"sys{p}", "tokens": 50}],
            )
        )
    return out


def _plain(column: str, value: Any) -> Any:
    """Floats (dollar sums) compared to 12 significant digits: partial sums merged in
    another order may differ in the last bit; a TTFT histogram by its (bin, count)
    pairs, whose stored order follows the order of the merges."""
    if column.startswith("ttft_") and isinstance(value, bytes):
        bins, counts = histogram.decode(value)
        return tuple(sorted(zip(bins.tolist(), counts.tolist(), strict=True)))
    return f"{value:.12g}" if isinstance(value, float) and math.isfinite(value) else value


def rows_of(session: Session) -> dict[str, list[tuple[Any, ...]]]:
    """Every row the pass writes, without ids, in a fixed order."""
    out = {}
    for name, model in TABLES.items():
        table = model.__table__
        columns = [c for c in table.c if c.name != "id"]
        rows = [
            tuple(_plain(c.name, v) for c, v in zip(columns, r, strict=True))
            for r in session.execute(select(*columns)).all()
        ]
        out[name] = sorted(rows, key=lambda r: tuple((v is None, str(v)) for v in r))
    return out


def state_of(session: Session) -> tuple[Any, ...]:
    blob = repository.get_state(session, analytics_pass.STATE)
    assert blob is not None
    state = ReuseState.from_bytes(blob)
    return (
        state.watermark,
        state.entries.sort(pl.all()).rows(),
        state.sessions.sort("session_id").rows(),
    )


def from_scratch(session: Session, settings: Settings) -> tuple[dict[str, Any], tuple[Any, ...]]:
    """The rows and state of one pass over every stored record: every derived row,
    the state and the cursors dropped, then one pass."""
    for model in (*TABLES.values(), AnalyticsState, AnalyticsCursor):
        session.execute(delete(model))
    catch_up(session, settings)
    return rows_of(session), state_of(session)


def late_records(n: int, hours: int, seed: int) -> list[dict[str, Any]]:
    """Records anywhere in the history: some in its old sessions, sharing its
    prefixes (so they warm later requests and become sessions' predecessors)."""
    return history(n, hours, seed, prefix="late")


@pytest.mark.parametrize(("seed", "kept"), [(1, 50), (2, 1)])
def test_late_records_in_a_history_equal_one_pass(
    session: Session, settings: Settings, seed: int, kept: int
) -> None:
    """Property: random late records shipped in a few batches after a history (the
    pass in small steps) leave every rollup and the state as one pass over all;
    with one group value kept an hour, the others folded, too."""
    hours = 12
    settings = settings.model_copy(update={"group_values_kept": kept})
    stepped = settings.model_copy(
        update={"analytics_step_records": 37, "analytics_step_minutes": 10**6}
    )
    store(session, history(100, hours, seed))
    catch_up(session, stepped)
    rng = random.Random(seed)
    late = late_records(rng.randrange(4, 10), hours, seed + 100)
    for start in range(0, len(late), 4):
        store(session, late[start : start + 4])
        report = catch_up(session, stepped)
        assert report.recomputed_from_us is not None  # the batch was late
    many = rows_of(session), state_of(session)
    one = from_scratch(session, settings)
    for name in TABLES:
        assert many[0][name] == one[0][name], name
    assert many[1] == one[1]


def _grain_s(name: str, row: Any) -> int:
    return {"segments": 3600, "groups": 60}.get(name) or int(row.grain_s)


def _kept_rows(session: Session, spans: list[tuple[int, int]]) -> dict[str, set[Any]]:
    """(id, bucket) of every row whose bucket lies outside the spans (hours after T0)."""

    def outside(start: int, grain_s: int) -> bool:
        end = start + grain_s * US
        return all(end <= T0 * US + a * HOUR_US or start >= T0 * US + b * HOUR_US for a, b in spans)

    out = {}
    for name, model in TABLES.items():
        rows = session.execute(select(model)).scalars().all()
        out[name] = {(r.id, r.bucket_us) for r in rows if outside(r.bucket_us, _grain_s(name, r))}
    return out


def _rewrites(session: Session, settings: Settings) -> dict[str, bool]:
    joined = assert_rollups_equal_one_pass(session, settings.reuse_window_s)
    table = repository.USAGE_TABLE.c
    names = dict(session.execute(select(table.id, table.request_id)).all())
    return {names[r["id"]]: r["history_rewrite"] for r in joined.iter_rows(named=True)}


def test_a_late_record_rebuilds_only_the_hours_it_can_change(
    session: Session, settings: Settings
) -> None:
    """One record in hour 2 of a 24-hour history: the hours 2 and 3 (its hour up to
    W after it) and hour 20 (its session's next request, now judged against it) are
    rebuilt; every other hour's rows are kept as they were, ids included."""
    assert settings.reuse_window_s == 3600
    store(session, history(80, 24, seed=7))
    opening = rec("s-open", T0 + 600, [1, 2, 3, 4], session_id="far")
    back = rec("s-back", T0 + 20 * 3600 + 100, [1, 9, 10], session_id="far", replica="a")
    store(session, [opening, back])
    catch_up(session, settings)
    assert _rewrites(session, settings)["s-back"]  # against its opening
    spans = [(2, 4), (20, 21)]
    kept = _kept_rows(session, spans)

    store(session, [rec("late", T0 + 2 * 3600 + 1800, [1, 9, 10], session_id="far")])
    report = catch_up(session, settings)

    assert report.recomputed_from_us == T0 * US + 2 * HOUR_US
    after = _kept_rows(session, spans)
    for name in TABLES:
        assert after[name] and after[name] == kept[name], name
    assert not _rewrites(session, settings)["s-back"]  # against the late record
    # And the rest as one pass from scratch makes it.
    many = rows_of(session), state_of(session)
    assert many == from_scratch(session, settings)


def test_the_pass_goes_in_steps_each_continuing_from_the_saved_state(
    session: Session, settings: Settings
) -> None:
    """`catch_up_step` takes at most `analytics_step_records` records and says
    whether more are left; the cursor, state and rollups it writes are what the next
    step continues from: step by step (late records among them) equals one pass."""
    stepped = settings.model_copy(
        update={"analytics_step_records": 40, "analytics_step_minutes": 10**6}
    )
    records = history(100, 4, seed=11)
    random.Random(3).shuffle(records)  # arrival order is not time order: late records
    store(session, records)
    reports = []
    while not reports or reports[-1].more:
        reports.append(catch_up_step(session, stepped))
    assert [r.records for r in reports] == [40, 40, 20]
    assert [r.more for r in reports] == [True, True, False]
    assert catch_up_step(session, stepped).records == 0
    many = rows_of(session), state_of(session)
    assert many == from_scratch(session, settings)


def test_a_step_ends_once_its_minutes_are_spent(session: Session, settings: Settings) -> None:
    """Sparse records cost by the minutes they touch: 30 records on 30 distinct
    minutes with a budget of 10 minutes go in steps of 10; a late record counts its
    hour and W (here 60 + 60 minutes), so it goes alone, and a step takes at least
    one record however late it is."""
    stepped = settings.model_copy(update={"analytics_step_minutes": 10})
    store(session, [rec(f"m{i}", T0 + 3600 * 5 + i * 60, [i]) for i in range(30)])
    reports = [catch_up_step(session, stepped) for _ in range(3)]
    assert [(r.records, r.more) for r in reports] == [(10, True), (10, True), (10, False)]
    store(session, [rec("late", T0, [1]), rec("after", T0 + 3600 * 6, [2])])
    late, after = catch_up_step(session, stepped), catch_up_step(session, stepped)
    assert (late.records, late.more, late.recomputed_from_us) == (1, True, T0 * US)
    assert (after.records, after.more, after.recomputed_from_us) == (1, False, None)
    assert (rows_of(session), state_of(session)) == from_scratch(session, settings)


def _shipped(url: str, batches: list[list[dict[str, Any]]], settings: Settings) -> Any:
    """Each batch committed, then the analytics job as the worker runs it (a step per
    transaction); the rows and state at the end."""
    from service import migrate, worker
    from service.db import make_engine, make_sessionmaker

    engine = make_engine(settings.model_copy(update={"database_url": url}))
    migrate.upgrade(engine)
    factory = make_sessionmaker(engine)
    try:
        for batch in batches:
            with factory.begin() as session:
                store(session, batch)
            worker._run("analytics", analytics_pass.catch_up_step, factory, settings)
        with factory() as session:
            return rows_of(session), state_of(session)
    finally:
        engine.dispose()


def test_a_shuffled_stream_shipped_between_passes_equals_one_pass(
    tmp_path: Any, settings: Settings
) -> None:
    """Issue 32: a shuffled stream shipped in batches while the job runs between
    them (in steps, each committed) leaves the rollups and state of one pass over
    the complete data, on either database."""
    from tests.conftest import drop_database, fresh_database_url

    records = history(120, 6, seed=21)
    random.Random(5).shuffle(records)
    stepped = settings.model_copy(update={"analytics_step_records": 30})
    batches = [records[i : i + 20] for i in range(0, len(records), 20)]
    urls = [fresh_database_url(tmp_path, label) for label in ("stream", "once")]
    try:
        streamed = _shipped(urls[0], batches, stepped)
        once = _shipped(urls[1], [records], settings)
    finally:
        for url in urls:
            drop_database(url)
    assert streamed == once


def test_late_records_reaching_the_tail_count_one_rebuild(
    session: Session, settings: Settings
) -> None:
    """A shuffled batch, all late, its spans reaching the newest hour, is one rebuild
    from its earliest hour to the watermark: it counts those hours once (here 6,
    360 minutes of a 400-minute budget), not an hour and W for each hour it touches
    (6 x 120), so it goes in one step with 40 forward records, one a minute; the
    next record opens the next step."""
    stepped = settings.model_copy(update={"analytics_step_minutes": 400})
    store(session, [rec("newest", T0 + 6 * 3600 - 30, [1])])
    assert catch_up_step(session, stepped).records == 1
    late = [rec(f"l{i}", T0 + i * 600 + 1, [i]) for i in range(36)]
    random.Random(2).shuffle(late)
    store(session, [*late, *(rec(f"f{i}", T0 + 6 * 3600 + i * 60, [i]) for i in range(60))])
    first = catch_up_step(session, stepped)
    assert (first.records, first.more, first.recomputed_from_us) == (36 + 40, True, T0 * US)
    assert catch_up_step(session, stepped).records == 20
    assert (rows_of(session), state_of(session)) == from_scratch(session, settings)
