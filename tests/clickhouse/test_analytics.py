"""The ClickHouse pass's per-request values equal the relational pass's, id for
id, on the property tests' random traffic (every cause, sessions, prefix keys,
ties, caching profiles, windows from 0 to unbounded), in the engine in-process;
and the Mooncake traces' published numbers come out of it."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from service.analytics import compute_request_metrics
from service.analytics._arrays import window_us
from service.analytics.definitions import SUM_COLUMNS, ratios
from service.clickhouse import analytics as ch_analytics
from service.clickhouse import pass_sql
from service.clickhouse.client import ClickHouse
from service.clickhouse.pass_sql import Scope
from service.rollups import aggregate
from tests.analytics.conftest import mooncake_frame
from tests.analytics.reference import Record, to_frame
from tests.analytics.test_properties import WINDOWS, traffic
from tests.clickhouse.frames import annotate_from, insert_frame
from tests.conftest import is_postgres_run

#: The relational database plays no part here: one of `make test`'s two runs is enough.
pytestmark = pytest.mark.skipif(is_postgres_run(), reason="no relational database involved")

TABLES = ("usage_records", "block_uses", "session_requests", "request_results")
TOL = 1e-6


def clickhouse_results(
    ch: ClickHouse,
    frame: pl.DataFrame,
    window_s: float,
    shards: int = 3,
    from_us: int | None = None,
) -> pl.DataFrame:
    """The values of the records from `from_us` on (all by default), the ones
    before it only looked back at."""
    for table in TABLES:
        ch.command(f"TRUNCATE TABLE {table}")
    insert_frame(ch, frame)
    high = int(frame["id"].max())  # type: ignore[arg-type]
    start = int(frame["ts_us"].min()) if from_us is None else from_us  # type: ignore[arg-type]
    scope = Scope(from_us=start, high_id=high, window_us=window_us(window_s))
    _, results = ch_analytics.compute(ch, scope, shards, annotate_from(frame))
    return results


def by_id(results: pl.DataFrame) -> dict[int, dict[str, Any]]:
    return {row["id"]: row for row in results.to_dicts()}


def assert_same(ch: ClickHouse, records: list[Record], window_s: float) -> None:
    frame = to_frame(records)
    expected, _ = compute_request_metrics(frame, window_s)
    got = clickhouse_results(ch, frame, window_s)
    assert got.schema == expected.schema
    assert by_id(got) == by_id(expected)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(records=traffic(), window_s=WINDOWS)
def test_equals_the_relational_pass(
    chdb: ClickHouse, records: list[Record], window_s: float
) -> None:
    assert_same(chdb, records, window_s)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(records=traffic(min_size=2), window_s=WINDOWS, split_s=st.integers(0, 9))
def test_a_later_range_looks_back(
    chdb: ClickHouse, records: list[Record], window_s: float, split_s: int
) -> None:
    """A pass that starts at `from_us` (a forward pass, a rebuilt hour) reads only
    the latest use of each key before it, and each session's latest request: the
    values of the records from there on are those of one pass over everything."""
    frame = to_frame(records)
    from_us = split_s * 1_000_000
    expected, _ = compute_request_metrics(frame, window_s)
    got = clickhouse_results(chdb, frame, window_s, from_us=from_us)
    assert by_id(got) == by_id(expected.filter(pl.col("ts_us") >= from_us))


def test_one_shard_and_many_give_the_same(chdb: ClickHouse) -> None:
    frame = mooncake_frame("conversation_trace.jsonl").head(2000)
    one = clickhouse_results(chdb, frame, 3600.0, shards=1)
    many = clickhouse_results(chdb, frame, 3600.0, shards=7)
    assert one.equals(many)


def test_chained_hashes_take_the_aggregates(chdb: ClickHouse) -> None:
    """A real trace's block hashes are chained: every request's block columns come
    from the plain aggregates (`exact`), equal to their definition."""
    frame = mooncake_frame("conversation_trace.jsonl").head(2000)
    clickhouse_results(chdb, frame, 3600.0)  # leaves the pass's pass_uses behind
    by_aggregates = chdb.query(pass_sql.blocks_sql()).sort("id")
    by_definition = chdb.query(pass_sql.blocks_exact_sql()).sort("id")
    assert by_aggregates.height == 2000
    assert by_aggregates["exact"].cast(pl.Boolean).all()
    assert by_aggregates.equals(by_definition)


@pytest.mark.parametrize(
    ("trace", "published"),
    [("conversation_trace.jsonl", 0.373624), ("synthetic_trace.jsonl", 0.651244)],
)
def test_mooncake_numbers(chdb: ClickHouse, trace: str, published: float) -> None:
    frame = mooncake_frame(trace)
    results = clickhouse_results(chdb, frame, 3600.0)
    rows = aggregate.rollup_sums(aggregate.join_results(frame, results), 3600)
    sums = {name: rows[name].sum() for name in SUM_COLUMNS}
    assert ratios(sums, ["cacheable_fraction"])["cacheable_fraction"] == pytest.approx(
        published, abs=TOL
    )
