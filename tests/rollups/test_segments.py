"""The segment rollups: static segments only, lost tokens, merging, compaction."""

import orjson
import polars as pl

from service.rollups import segments
from service.rollups.groups import OTHER

HOUR = segments.HOUR_US


def _joined(rows: list[dict[str, object]]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {
                "id": i,
                "ts_us": r.get("ts_us", 0),
                "service": r.get("service", "svc"),
                "model": "m",
                "scenario": r.get("scenario"),
                "prompt_tokens": 1000,
                "cached_tokens": r.get("cached", 0),
                "cacheable_tokens": r.get("cacheable", 0),
                "segments": orjson.dumps(r["segments"]).decode(),
            }
            for i, r in enumerate(rows)
        ]
    )


def _segments(system: object) -> list[dict[str, object]]:
    return [
        {"name": "tools", "hash": "t", "tokens": 100},
        {"name": "system", "hash": system, "tokens": 200, "norm_hash": "n"},
        {"name": "message[0]", "hash": "m", "tokens": 300},
        {"name": "late", "hash": "x", "tokens": 5},
    ]


def test_only_the_static_start_is_kept_with_what_each_part_lost() -> None:
    parts = segments.static_segments(
        _joined([{"segments": _segments("a"), "cacheable": 150, "cached": 100}])
    )
    assert parts["name"].to_list() == ["tools", "system"]  # nothing after message[0]
    # The static start ends at 300; 150 were reusable: tools lost 300 - 150, system
    # (from 100 on) 300 - 150 as well.
    assert parts["lost_tokens"].to_list() == [150, 150]
    warm = segments.static_segments(_joined([{"segments": _segments("a"), "cacheable": 300}]))
    assert warm["lost_tokens"].to_list() == [0, 0]


def test_int_hashes_are_their_decimal_text_and_scenarios_are_kept() -> None:
    sums = segments.segment_sums(
        _joined([{"segments": _segments(12345), "scenario": "web"}, {"segments": _segments(12345)}])
    )
    system = sums.filter(pl.col("name") == "system").sort("scenario")
    assert system["hash"].to_list() == ["12345", "12345"]
    assert system["scenario"].to_list() == ["", "web"]
    assert system["norm_hash"].to_list() == ["n", "n"]


def test_compaction_keeps_distinct_variants_and_totals_exact() -> None:
    rows = [
        {"ts_us": h * HOUR + i, "segments": _segments(f"v{i % (100 if h == 0 else 10)}")}
        for h in range(2)
        for i in range(300)
    ]
    sums = segments.segment_sums(_joined(rows))
    compacted = segments.compact(sums, over_before_us=HOUR)
    system = compacted.filter(pl.col("name") == "system")
    first = system.filter(pl.col("bucket_us") == 0)
    # Hour 0 had 100 variants (> FOLD_OVER): KEEP rows and one folded row.
    assert first.height == segments.KEEP + 1
    folded = first.filter(pl.col("hash") == segments.FOLDED_HASH)
    assert folded["folded"].item() == 100 - segments.KEEP
    assert first.filter(pl.col("hash") != "").height + folded["folded"].item() == 100
    for column in ("requests", "prompt_tokens", "lost_tokens"):
        assert compacted[column].sum() == sums[column].sum()
    # Hour 1 is not over (and has only 10 variants): untouched.
    assert system.filter(pl.col("bucket_us") == HOUR).height == 10
    # Compacting again changes nothing.
    assert (
        segments.compact(compacted, HOUR).sort(segments.KEYS).equals(compacted.sort(segments.KEYS))
    )


def test_an_hour_where_every_request_is_its_own_variant_is_one_row() -> None:
    rows = [{"ts_us": i, "segments": _segments(f"t{i}")} for i in range(200)]
    system = segments.compact(segments.segment_sums(_joined(rows)), HOUR).filter(
        pl.col("name") == "system"
    )
    assert system.select("hash", "folded", "requests").rows() == [("", 200, 200)]


def test_merging_adds_rows_of_the_same_variant() -> None:
    batch = segments.segment_sums(_joined([{"segments": _segments("a")}]))
    merged = segments.merge([batch, batch])
    assert merged["requests"].to_list() == [2, 2]
    assert merged.height == batch.height


def test_shared_and_distinct_static_texts_give_the_same_rows() -> None:
    """Rows sharing one static text are decoded once and joined back: each keeps its
    own lost tokens, as when it is alone."""
    rows = [
        {"segments": _segments("a"), "cacheable": reuse, "ts_us": i}
        for i, reuse in enumerate([0, 100, 150, 250, 300, 0])
    ]
    shared = segments.static_segments(_joined(rows))
    alone = pl.concat([segments.static_segments(_joined([r])) for r in rows])
    key = ["name", "lost_tokens"]
    assert shared.sort(key).select(key).equals(alone.sort(key).select(key))
    assert shared.height == 12


def _named(n: int, start: int = 0, scenario: str | None = None) -> pl.DataFrame:
    """A batch of n requests, each with the stable `tools` and a segment named after
    it (a document id in the name)."""
    return segments.segment_sums(
        _joined(
            [
                {
                    "scenario": scenario,
                    "segments": [
                        {"name": "tools", "hash": "t", "tokens": 100},
                        {"name": f"doc-{start + i}", "hash": "d", "tokens": 50},
                    ],
                }
                for i in range(n)
            ]
        )
    )


def test_names_are_capped_from_the_first_write_and_the_rest_folded() -> None:
    rows = segments.capped(segments.empty(), _named(200))
    names = set(rows["name"])
    assert len(names) == segments.VALUES_KEPT + 1 and segments.FOLDED_NAME in names
    assert "tools" in names  # carried by every request: kept first
    assert int(rows["requests"].sum()) == 400  # every (request, segment) still counted
    folded = rows.filter(pl.col("name") == segments.FOLDED_NAME)
    assert folded["hash"].to_list() == [segments.FOLDED_HASH]
    assert folded["folded"].to_list() == [200 - segments.VALUES_KEPT + 1]
    # A later batch of new names: the kept ones stay, the new ones fold, nothing grows.
    again = segments.capped(rows, _named(200, start=1000))
    assert set(again["name"]) == names
    assert again.height == rows.height and int(again["requests"].sum()) == 800


def test_scenarios_are_capped_too_but_none_is_never_folded() -> None:
    batch = pl.concat([_named(1, i, scenario=f"user-{i}") for i in range(100)])
    batch = pl.concat([batch, _named(3, 500)])  # no scenario: ''
    rows = segments.capped(segments.empty(), batch)
    scenarios = set(rows["scenario"])
    assert "" in scenarios and OTHER in scenarios
    assert len(scenarios - {"", OTHER}) <= segments.VALUES_KEPT
    assert int(rows["requests"].sum()) == 206


def test_compaction_caps_the_names_of_rows_written_before_the_cap() -> None:
    uncapped = segments.merge([_named(100)])
    compacted = segments.compact(uncapped, HOUR)
    assert compacted["name"].n_unique() == segments.VALUES_KEPT + 1
    assert int(compacted["requests"].sum()) == 200
