"""The definitions of contract section 4 (`service.analytics.definitions`): the
ratios, the hit rule, and the sums the rollup tables store."""

from __future__ import annotations

import polars as pl
import pytest

from service.analytics.definitions import (
    CAUSES,
    RATIOS,
    REWARM_COLUMNS,
    REWARM_TOKEN_COLUMNS,
    SUM_COLUMNS,
    is_hit,
    ratio,
    ratio_expr,
    ratios,
)
from service.models import ChartRollup, Rollup, RollupSums


def test_zero_denominators_are_none() -> None:
    assert ratio(0, 0) is None and ratio(10, 0) is None
    assert ratio(5, 10) == 0.5
    zeros = dict.fromkeys([*SUM_COLUMNS, "distinct_prefixes"], 0)
    assert ratios(zeros) == dict.fromkeys(RATIOS, None)


def test_ratios_read_their_named_sums() -> None:
    sums = {name: 0 for name in SUM_COLUMNS} | {"distinct_prefixes": 3}
    sums |= {"cached_tokens": 25, "prompt_tokens": 100, "fp_requests": 6}
    assert ratios(sums, ("hit_rate", "unique_prefix_ratio")) == {
        "hit_rate": 0.25,
        "unique_prefix_ratio": 0.5,
    }


def test_the_expression_agrees_with_the_scalar_formula() -> None:
    values = {name: [0, 7, 3] for name in SUM_COLUMNS} | {"distinct_prefixes": [1, 2, 3]}
    values |= {"prompt_tokens": [0, 9, 4], "fp_requests": [5, 0, 6]}
    frame = pl.DataFrame(values)
    got = frame.select(ratio_expr(name) for name in RATIOS).to_dicts()
    assert got == [ratios(row) for row in frame.to_dicts()]


def test_is_hit() -> None:
    assert is_hit(50, 100) and not is_hit(49, 100) and is_hit(0, 0) and is_hit(1, 1)


def test_every_ratio_reads_known_sums() -> None:
    known = {*SUM_COLUMNS, "distinct_prefixes"}
    for name, r in RATIOS.items():
        assert {r.numerator, r.denominator} <= known, name


@pytest.mark.parametrize("table", [Rollup.__table__, ChartRollup.__table__])
def test_every_rollup_table_stores_every_sum(table: object) -> None:
    columns = {c.name for c in table.columns}  # type: ignore[attr-defined]
    assert set(SUM_COLUMNS) <= columns


def test_each_cause_has_its_two_sums() -> None:
    assert tuple(f"rewarms_{c}" for c in CAUSES) == REWARM_COLUMNS
    assert set(REWARM_COLUMNS) | set(REWARM_TOKEN_COLUMNS) <= set(SUM_COLUMNS)


def test_the_stored_sums_are_exactly_the_defined_ones() -> None:
    stored = set(RollupSums.__annotations__) - {"ttft_hit", "ttft_miss"}
    assert stored == set(SUM_COLUMNS)
