"""services.analytics_pass on the real database: the first pass computes every
stored record, a pass with nothing new does nothing, a late record is recomputed
with what follows it (from the start of its hour, reloading W before with the
plan of `service.analytics.state`, seeding the sessions that plan names), and the
rollups and chart rows it leaves are the sums of the per-request values of one
pass over every stored record (`compute_request_metrics`, summed here in plain
Python)."""

from collections import Counter
from typing import Any

import polars as pl
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from service import repository
from service.analytics.definitions import REWARM_COLUMNS
from service.analytics.requests import compute_request_metrics
from service.analytics.state import ReuseState, plan_from
from service.models import AnalyticsState, ChartRollup, PrefixRollup, Rollup, UsageRecord
from service.services import analytics_pass, rollup_writes
from service.services.analytics_pass import PassReport, catch_up
from service.settings import Settings
from tests.services.traffic import T0, US, rec, store, traffic

HOUR_US = 3600 * US
#: The sums checked against the per-request values (every one has a plain meaning).
CHECKED = (
    "requests",
    "prompt_tokens",
    "cached_tokens",
    "fp_requests",
    "cacheable_tokens",
    "rewarm_tokens",
    *REWARM_COLUMNS,
    "history_rewrites",
    "hits",
)
Key = tuple[Any, ...]


def one_pass(session: Session, window_s: float) -> pl.DataFrame:
    """Every stored record with its values from one pass over all of them."""
    records = repository.load_usage_frame(session)
    results, _ = compute_request_metrics(records, window_s)
    return records.drop("ts_us").join(results, on="id")


def expected_sums(joined: pl.DataFrame, grain_s: int, by_scope: bool) -> dict[Key, Counter[str]]:
    """The CHECKED sums per bucket (and per rollup key when `by_scope`), from the
    per-request values, one request at a time."""
    grain_us = grain_s * US
    out: dict[Key, Counter[str]] = {}
    for r in joined.iter_rows(named=True):
        bucket = r["ts_us"] // grain_us * grain_us
        scope = (r["service"], r["model"], r["deploy"] or "", r["replica"] or "")
        sums = out.setdefault((bucket, *scope) if by_scope else (bucket,), Counter())
        sums["requests"] += 1
        sums["prompt_tokens"] += r["prompt_tokens"]
        sums["cached_tokens"] += r["cached_tokens"]
        sums["fp_requests"] += r["fingerprinted"]
        sums["cacheable_tokens"] += r["cacheable_tokens"]
        sums["rewarm_tokens"] += r["rewarm_tokens"]
        if r["rewarm_cause"] is not None:
            sums[f"rewarms_{r['rewarm_cause']}"] += 1
        sums["history_rewrites"] += r["history_rewrite"]
        sums["hits"] += r["is_hit"]
    return {key: Counter({c: sums[c] for c in CHECKED}) for key, sums in out.items()}


def rollup_sums(session: Session, grain_s: int) -> dict[Key, Counter[str]]:
    keys = (Rollup.bucket_us, Rollup.service, Rollup.model, Rollup.deploy, Rollup.replica)
    columns = [getattr(Rollup, c) for c in CHECKED]
    rows = session.execute(select(*keys, *columns).where(Rollup.grain_s == grain_s)).all()
    return {tuple(r[:5]): Counter(dict(zip(CHECKED, r[5:], strict=True))) for r in rows}


def chart_sums(session: Session, grain_s: int) -> dict[Key, Counter[str]]:
    """The chart rows answering 'everything' (level 3) at one grain."""
    columns = [getattr(ChartRollup, c) for c in CHECKED]
    query = select(ChartRollup.bucket_us, *columns).where(
        ChartRollup.grain_s == grain_s, ChartRollup.level == 3, ChartRollup.group_by == ""
    )
    rows = session.execute(query).all()
    return {(r[0],): Counter(dict(zip(CHECKED, r[1:], strict=True))) for r in rows}


def prefix_requests(session: Session, grain_s: int) -> Counter[Key]:
    query = select(PrefixRollup.bucket_us, PrefixRollup.first_key, PrefixRollup.requests).where(
        PrefixRollup.grain_s == grain_s
    )
    out: Counter[Key] = Counter()
    for bucket, key, requests in session.execute(query).all():
        out[(bucket, key)] += requests
    return out


def assert_rollups_equal_one_pass(session: Session, window_s: float) -> pl.DataFrame:
    joined = one_pass(session, window_s)
    for grain_s in rollup_writes.GRAINS_S:
        assert rollup_sums(session, grain_s) == expected_sums(joined, grain_s, True), grain_s
    for grain_s in (60, 300, 3600, 86_400):
        assert chart_sums(session, grain_s) == expected_sums(joined, grain_s, False), grain_s
    fingerprinted = joined.filter(pl.col("fingerprinted"))
    for grain_s in rollup_writes.PREFIX_GRAINS_S:
        grain_us = grain_s * US
        want = Counter(
            (ts // grain_us * grain_us, key)
            for ts, key in fingerprinted.select("ts_us", "first_key").iter_rows()
        )
        assert prefix_requests(session, grain_s) == want, grain_s
    return joined


def saved_state(session: Session) -> ReuseState:
    blob = repository.get_state(session, analytics_pass.STATE)
    assert blob is not None
    return ReuseState.from_bytes(blob)


def ordered(table: Any) -> Any:
    return select(table).order_by(*table.primary_key.columns)


def snapshot(session: Session) -> dict[str, list[dict[str, Any]]]:
    """Every row the pass writes, ids included (a rewritten row gets a new id)."""
    tables = {
        "rollups": Rollup,
        "prefix": PrefixRollup,
        "chart": ChartRollup,
        "state": AnalyticsState,
    }
    return {
        name: [dict(r) for r in session.execute(ordered(model.__table__)).mappings()]
        for name, model in tables.items()
    }


def ends_by(row: dict[str, Any], ts_us: int) -> bool:
    return bool(row["bucket_us"] + row["grain_s"] * US <= ts_us)


def test_a_first_pass_computes_every_stored_record(session: Session, settings: Settings) -> None:
    records = traffic(300, seed=1)
    store(session, records)
    report = catch_up(session, settings)
    assert report == PassReport(records=300, recomputed_from_us=None)
    high = repository.max_usage_id(session)
    assert repository.get_cursor(session, analytics_pass.CURSOR) == high
    newest = max(repository.load_usage_frame(session).select("ts_us", "id").iter_rows())
    assert saved_state(session).watermark == newest
    joined = assert_rollups_equal_one_pass(session, settings.reuse_window_s)
    # The data exercises what the sums count.
    assert joined["cacheable_tokens"].sum() > 0 and joined["rewarm_cause"].null_count() < 300
    assert joined["history_rewrite"].sum() > 0


def test_a_second_pass_with_nothing_new_does_nothing(
    session: Session, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    store(session, traffic(200, seed=2))
    catch_up(session, settings)
    before = snapshot(session)

    def no_compute(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a pass with nothing new computed something")

    monkeypatch.setattr(analytics_pass, "compute_request_metrics", no_compute)
    assert catch_up(session, settings) == PassReport(0, None)
    assert snapshot(session) == before


def test_a_late_record_is_recomputed_with_what_follows_it(
    session: Session, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Session `s` opens in hour 0 and comes back, rewritten, in hour 3; a late
    record in hour 3 warms the blocks of the request after it. Its recompute
    starts at hour 3 and reloads from hour 2 (W = 1 h before), so `s`'s request
    of hour 0 must be seeded for its hour-3 request to count as a rewrite."""
    assert settings.reuse_window_s == 3600
    store(session, traffic(200, seed=3))
    first = rec("s-open", T0 + 600, [1, 2, 3, 4], session_id="s", replica="a")
    back = rec("s-back", T0 + 3 * 3600 + 3000, [1, 9, 10], session_id="s", replica="a")
    warmed = rec("warmed", T0 + 3 * 3600 + 1800, [50, 51, 52], replica="a", cached_tokens=200)
    store(session, [first, back, warmed])
    catch_up(session, settings)
    state = saved_state(session)
    before = snapshot(session)

    calls: dict[str, list[Any]] = {"reload": [], "seeds": []}
    real_load, real_seeds = repository.load_usage_frame, repository.load_session_seeds

    def load(session: Session, **kwargs: Any) -> pl.DataFrame:
        calls["reload"].append(kwargs.get("from_us"))
        return real_load(session, **kwargs)

    def seeds(session: Session, ids: Any, before_us: int, up_to_id: int) -> pl.DataFrame:
        calls["seeds"].append((tuple(ids), before_us))
        return real_seeds(session, ids, before_us, up_to_id)

    monkeypatch.setattr(repository, "load_usage_frame", load)
    monkeypatch.setattr(repository, "load_session_seeds", seeds)
    late = rec("late", T0 + 3 * 3600 + 1200, [50, 51, 52], replica="b")
    store(session, [late])
    report = catch_up(session, settings)
    monkeypatch.undo()

    hour = T0 * US + 3 * HOUR_US
    assert report == PassReport(records=1, recomputed_from_us=hour)  # the late one's hour
    plan = plan_from(state, hour)
    assert plan.reload_from_ts_us == hour - HOUR_US and "s" in plan.seed_sessions
    # The batch, then the reload the plan asks for, with its seeds.
    assert calls["reload"] == [None, plan.reload_from_ts_us]
    assert calls["seeds"] == [(plan.seed_sessions, plan.reload_from_ts_us)]

    joined = assert_rollups_equal_one_pass(session, settings.reuse_window_s)
    ids = dict(session.execute(select(UsageRecord.request_id, UsageRecord.id)).all())
    values = {r["id"]: r for r in joined.iter_rows(named=True)}
    assert values[ids["s-back"]]["history_rewrite"]  # judged against the seeded opening
    assert values[ids["warmed"]]["cacheable_tokens"] == 300  # the late record warmed it
    # The buckets that end before the recomputed hour were kept, not rewritten.
    after = snapshot(session)
    for name in ("rollups", "prefix", "chart"):
        kept = [r for r in before[name] if ends_by(r, hour)]
        assert kept and kept == [r for r in after[name] if ends_by(r, hour)], name
    assert after["chart"] != before["chart"]


def test_a_new_window_recomputes_everything(session: Session, settings: Settings) -> None:
    store(session, traffic(200, seed=4))
    catch_up(session, settings)
    shorter = settings.model_copy(update={"reuse_window_s": 60.0})
    store(session, traffic(20, seed=5))
    assert catch_up(session, shorter) == PassReport(records=20, recomputed_from_us=0)
    assert saved_state(session).window_us == 60 * US
    assert_rollups_equal_one_pass(session, 60.0)


def _segment_rows(url: str, records: list[dict[str, Any]], chunks: int) -> list[tuple[Any, ...]]:
    from service import migrate
    from service.db import make_engine, make_sessionmaker
    from service.repository import segments as segments_repo

    settings = Settings(database_url=url, run_jobs=False)
    engine = make_engine(settings)
    migrate.upgrade(engine)
    size = -(-len(records) // chunks)
    try:
        for start in range(0, len(records), size):
            with make_sessionmaker(engine).begin() as session:
                store(session, records[start : start + size])
                catch_up(session, settings)
        table = segments_repo.SEGMENT_TABLE
        columns = [c for c in table.c if c.name != "id"]
        with make_sessionmaker(engine).begin() as session:
            rows = [tuple(r) for r in session.execute(select(*columns)).all()]
        return sorted(rows, key=lambda r: tuple(str(v) for v in r))
    finally:
        engine.dispose()


def test_segment_rollups_of_many_passes_equal_one_pass(tmp_path: Any) -> None:
    """Each pass takes back the tail hour, merges the batch into it and compacts the
    hours that ended: batches of a volatile and a stable segment over three hours give
    the rows one pass gives, compaction included."""
    from tests.conftest import drop_database, fresh_database_url
    from tests.services import findings_traffic

    records = findings_traffic.volatile_segment() + [
        {**r, "request_id": f"d{r['request_id']}"} for r in findings_traffic.template_drift()
    ]
    records.sort(key=lambda r: r["ts"])
    urls = [fresh_database_url(tmp_path, f"segments_{n}") for n in (1, 7)]
    try:
        one, many = (_segment_rows(url, records, n) for url, n in zip(urls, (1, 7), strict=True))
    finally:
        for url in urls:
            drop_database(url)
    assert many == one
    folded = [r for r in one if r[5] == ""]  # hash '': the volatile hours, compacted
    assert len(folded) == 2  # the two hours that ended; the last one is still open


def _tenant_rows(session: Session) -> pl.DataFrame:
    from service.repository import groups as groups_repo

    rows = groups_repo.load_group_rollups(session, None, None)
    return rows.filter(pl.col("group_by") == "tenant").with_columns(
        (pl.col("bucket_us") // HOUR_US).alias("hour")
    )


def test_the_open_hour_keeps_its_busiest_tenants_from_the_first_write(
    session: Session, settings: Settings
) -> None:
    """Passes in one open hour, each bringing 10 new tenants: the hour holds 3 tenants
    and the rest (`OTHER`) after every pass, the tenant rows add up to every record,
    and the busy tenant sending in every pass is kept with its exact numbers."""
    from service.rollups import groups

    settings = settings.model_copy(update={"group_values_kept": 3})
    for k in range(5):
        batch = [rec(f"big{k}", T0 + k * 600, [1, 2], tenant="big", prompt_tokens=1_000)]
        batch += [
            rec(f"n{k}-{i}", T0 + k * 600 + i + 1, [1, 2], tenant=f"n{k}-{i}", prompt_tokens=100)
            for i in range(10)
        ]
        store(session, batch)
        catch_up(session, settings)
        tenants = _tenant_rows(session)
        assert tenants["group_value"].n_unique() <= 4
        assert int(tenants["requests"].sum()) == 11 * (k + 1)
        assert int(tenants["prompt_tokens"].sum()) == 2_000 * (k + 1)
    big = tenants.filter(pl.col("group_value") == "big")
    assert (int(big["requests"].sum()), int(big["prompt_tokens"].sum())) == (5, 5_000)
    assert groups.OTHER in set(tenants["group_value"])


def test_hours_written_before_the_cap_are_folded_once_they_are_over(
    session: Session, settings: Settings
) -> None:
    """Group rows of an hour holding more values than kept (written before the cap
    applied from the first write) are folded into `OTHER` by the next pass that
    passes that hour, their sums unchanged."""
    from service.repository import groups as groups_repo
    from service.rollups import groups

    settings = settings.model_copy(update={"group_values_kept": 2})
    store(session, [rec(f"r{i}", T0 + i, [1, 2], tenant=f"t{i}") for i in range(6)])
    catch_up(session, settings)
    # As the code before the cap left them: every value of the (then open) hour.
    folded = _tenant_rows(session)
    groups_repo.delete_group_rollups(session, T0 * US)
    joined = aggregate_joined(session, settings.reuse_window_s)
    uncapped = groups.minute_rows(joined)
    groups_repo.insert_group_rollups(session, uncapped)
    # What a span of whole hours writes (a rebuild): the kept values, as the pass.
    whole = groups.whole_hours_rows(joined, 2).filter(pl.col("group_by") == "tenant")
    assert set(whole["group_value"]) == set(folded["group_value"])
    assert _tenant_rows(session)["group_value"].n_unique() == 6
    store(session, [rec("later", T0 + 3_600 + 5, [1, 2], tenant="t9")])
    catch_up(session, settings)
    hour = _tenant_rows(session).filter(pl.col("hour") == T0 * US // HOUR_US)
    assert set(hour["group_value"]) == set(folded["group_value"])
    assert int(hour["requests"].sum()) == 6


def aggregate_joined(session: Session, window_s: float) -> pl.DataFrame:
    """Every stored record joined with its values, as the pass joins them."""
    from service.rollups import aggregate

    records = repository.load_usage_frame(session)
    results, _ = compute_request_metrics(records, window_s)
    return aggregate.join_results(records, results)
