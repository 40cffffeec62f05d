"""The group rollups' pure core (service.rollups.groups): which values an hour keeps
from the first write, the rest folded into `OTHER` with the totals exact, and the
folding of hours written before the cap."""

import polars as pl

from service.rollups import groups

HOUR_US = 3600 * 1_000_000
MINUTE_US = 60 * 1_000_000


def rows(per_hour: dict[int, dict[str, int]], by: str = "tenant") -> pl.DataFrame:
    """Stored rows: each value one minute of the hour with its prompt tokens."""
    out = []
    for hour, values in per_hour.items():
        for minute, (value, tokens) in enumerate(values.items()):
            out.append(
                {
                    "bucket_us": hour * HOUR_US + minute * MINUTE_US,
                    "service": "s",
                    "model": "m",
                    "group_by": by,
                    "group_value": value,
                    "requests": 1,
                    "prompt_tokens": tokens,
                }
            )
    frame = pl.DataFrame(out)
    missing = [
        pl.lit(0 if dtype.is_integer() else None, dtype).alias(name)
        for name, dtype in groups.STORED_SCHEMA.items()
        if name not in frame.columns
    ]
    return frame.with_columns(missing).select(groups.STORED).cast(groups.STORED_SCHEMA)  # type: ignore[arg-type]


def kept(frame: pl.DataFrame) -> set[tuple[int, str]]:
    return {
        (b // HOUR_US, v)
        for b, v in frame.select("bucket_us", "group_value").rows()
        if v != groups.OTHER
    }


def totals(frame: pl.DataFrame) -> dict[tuple[int, str], tuple[int, int]]:
    """Per hour and field, the requests and prompt tokens of every row."""
    summed = frame.group_by((pl.col("bucket_us") // HOUR_US).alias("hour"), "group_by").agg(
        pl.col("requests").sum(), pl.col("prompt_tokens").sum()
    )
    return {(h, by): (r, t) for h, by, r, t in summed.rows()}


def other_tokens(frame: pl.DataFrame, hour: int) -> int:
    mask = (pl.col("group_value") == groups.OTHER) & (pl.col("bucket_us") // HOUR_US == hour)
    return int(frame.filter(mask)["prompt_tokens"].sum())


def test_compact_folds_each_hour_beyond_its_busiest_values_into_other() -> None:
    frame = rows({0: {"a": 5, "b": 9, "c": 7, "d": 1}, 1: {"a": 9, "b": 1, "c": 2, "d": 8}})
    compacted = groups.compact(frame, 2)
    assert kept(compacted) == {(0, "b"), (0, "c"), (1, "a"), (1, "d")}
    assert other_tokens(compacted, 0) == 6 and other_tokens(compacted, 1) == 3
    assert totals(compacted) == totals(frame)  # nothing is lost, only merged


def test_ties_keep_the_smaller_value_so_a_rerun_keeps_the_same() -> None:
    frame = rows({0: {"z": 3, "y": 3, "x": 3}})
    assert kept(groups.compact(frame, 2)) == {(0, "x"), (0, "y")}
    assert kept(groups.compact(frame.reverse(), 2)) == {(0, "x"), (0, "y")}


def test_each_field_and_scope_keeps_its_own() -> None:
    frame = pl.concat([rows({0: {"a": 1, "b": 2}}), rows({0: {"a": 1, "b": 2}}, by="scenario")])
    assert kept(groups.compact(frame, 1)) == {(0, "b")}
    assert groups.compact(frame, 1).height == 4  # b and the rest, per field
    assert groups.compact(frame, 5).height == frame.height


def test_new_values_are_admitted_while_the_hour_has_room() -> None:
    stored = groups.hour_tokens(rows({0: {"a": 100}}))
    batch = groups.hour_tokens(rows({0: {"b": 1, "c": 2}}))
    chosen = groups.choose(stored, batch, 3)
    assert set(chosen["group_value"]) == {"a", "b", "c"}


def test_a_kept_value_counts_its_hour_so_far_and_a_new_one_only_its_batch() -> None:
    # `a` has 50 stored and 1 in the batch; `b` 40 in the batch: `a` stays.
    stored = groups.hour_tokens(rows({0: {"a": 50}}))
    batch = groups.hour_tokens(rows({0: {"a": 1, "b": 40}}))
    assert groups.choose(stored, batch, 1)["group_value"].to_list() == ["a"]
    # A new value busier in one batch than a kept one all hour evicts it.
    batch = groups.hour_tokens(rows({0: {"b": 60}}))
    assert groups.choose(stored, batch, 1)["group_value"].to_list() == ["b"]
    assert groups.evicted_from(rows({0: {"a": 50}}), groups.choose(stored, batch, 1)) == 0


def test_other_is_never_a_candidate_and_a_value_sending_its_name_counts_in_it() -> None:
    stored = groups.hour_tokens(rows({0: {groups.OTHER: 1_000, "a": 1}}))
    assert set(stored["group_value"]) == {"a"}
    chosen = groups.choose(stored, stored.clear(), 5)
    folded = groups.fold(rows({0: {groups.OTHER: 1_000, "a": 1}}), chosen)
    assert sorted(folded["group_value"]) == [groups.OTHER, "a"]


def test_folding_keeps_every_sum_of_the_hour() -> None:
    frame = rows({0: {f"t{i}": i for i in range(1, 21)}, 1: {"t1": 5}})
    chosen = groups.choose(groups.hour_tokens(frame).clear(), groups.hour_tokens(frame), 3)
    folded = groups.merge([groups.fold(frame, chosen)])
    assert totals(folded) == totals(frame)
    assert kept(folded) == {(0, "t20"), (0, "t19"), (0, "t18"), (1, "t1")}
    assert other_tokens(folded, 0) == sum(range(1, 18))
