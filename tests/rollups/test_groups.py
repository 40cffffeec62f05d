"""The group rollups' pure core (service.rollups.groups): what an hour that is over
keeps, and the merge of a batch's minute rows with the tail it continues."""

import polars as pl

from service.rollups import groups

HOUR_US = 3600 * 1_000_000
MINUTE_US = 60 * 1_000_000


def rows(per_hour: dict[int, dict[str, int]], by: str = "tenant") -> pl.DataFrame:
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
                    "prompt_tokens": tokens,
                }
            )
    return pl.DataFrame(out)


def kept(frame: pl.DataFrame) -> set[tuple[int, str]]:
    return {(b // HOUR_US, v) for b, v in frame.select("bucket_us", "group_value").rows()}


def test_each_finished_hour_keeps_its_own_busiest_values() -> None:
    frame = rows({0: {"a": 5, "b": 9, "c": 7, "d": 1}, 1: {"a": 9, "b": 1, "c": 2, "d": 8}})
    assert kept(groups.compact(frame, 2)) == {(0, "b"), (0, "c"), (1, "a"), (1, "d")}


def test_ties_keep_the_smaller_value_so_a_rerun_keeps_the_same() -> None:
    frame = rows({0: {"z": 3, "y": 3, "x": 3}})
    assert kept(groups.compact(frame, 2)) == {(0, "x"), (0, "y")}
    assert kept(groups.compact(frame.reverse(), 2)) == {(0, "x"), (0, "y")}


def test_each_field_and_scope_keeps_its_own() -> None:
    frame = pl.concat([rows({0: {"a": 1, "b": 2}}), rows({0: {"a": 1, "b": 2}}, by="scenario")])
    assert len(groups.compact(frame, 1)) == 2
    assert groups.compact(frame, 5).height == frame.height
