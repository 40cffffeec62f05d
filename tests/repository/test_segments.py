"""service.repository.segments on the real database: the row of the names not kept
(`segments.FOLDED_NAME`) is never read as a segment of its own; `frequent_variants`
(template drift's candidates) under many segment names (issue 32) is one scan with
window sums, where joining grouped subqueries back to the table was a nested loop
on SQLite (quadratic in the names: 3,000 names took 2.3 s, 30,000 minutes)."""

import time

import polars as pl
from sqlalchemy.orm import Session

from service.repository import segments as segments_repo
from service.rollups import segments

HOUR = segments.HOUR_US
NAMES = 4000


def _row(name: str, hash_: str, requests: int, folded: int = 0) -> dict[str, object]:
    return {
        "bucket_us": HOUR,
        "service": "svc",
        "model": "m",
        "scenario": "",
        "name": name,
        "hash": hash_,
        "norm_hash": None,
        "tokens": 10,
        "folded": folded,
        "requests": requests,
        "prompt_tokens": 1000 * requests,
        "lost_tokens": 10 * requests,
    }


def test_the_folded_names_are_no_segment_of_the_findings(session: Session) -> None:
    # 100 document names folded into one row: as many variants as carriers.
    rows = [_row(segments.FOLDED_NAME, segments.FOLDED_HASH, 100, 100), _row("tools", "t", 100, 0)]
    segments_repo.insert_segment_rollups(session, pl.DataFrame(rows, schema=segments.SCHEMA))
    bounds = {"models": ["m"], "from_us": None, "to_us": None}
    hours = segments_repo.volatile_hours(session, **bounds, min_requests=10, share=0.5)
    assert hours.is_empty()
    spans = segments_repo.segment_spans(session, **bounds)
    assert set(spans["name"]) == {"tools"}
    bare = segments_repo.bare_variant_counts(session, **bounds)
    assert set(bare["name"]) == {"tools"}
    variants = segments_repo.frequent_variants(session, **bounds, min_share=0.05)
    assert set(variants["name"]) == {"tools"}


def test_frequent_variants_of_thousands_of_names_in_one_scan(session: Session) -> None:
    rows = [_row(f"doc-{i}", f"d{i}", 1) for i in range(NAMES)]
    # `system`: 90 + 8 + 2 requests and 20 folded: only variants of >= 5% are kept.
    rows += [_row("system", "a", 90), _row("system", "b", 8), _row("system", "c", 2)]
    rows += [_row("system", segments.FOLDED_HASH, 20, folded=20)]
    segments_repo.insert_segment_rollups(session, pl.DataFrame(rows, schema=segments.SCHEMA))
    started = time.perf_counter()
    found = segments_repo.frequent_variants(
        session, models=["m"], from_us=None, to_us=None, min_share=0.05
    )
    elapsed = time.perf_counter() - started
    system = found.filter(pl.col("name") == "system")
    # 8 of 120 carriers is 6.7%; 2 of 120 is under 5%; the folded row is no variant.
    assert sorted(system["hash"]) == ["a", "b"]
    assert found.height == NAMES + 2
    assert elapsed < 1.5, f"{NAMES} names took {elapsed:.1f} s"
