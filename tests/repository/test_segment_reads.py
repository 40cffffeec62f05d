"""`segments_repo.frequent_variants` (template drift's candidates) on the real
database under many segment names (issue 32): one scan with window sums, where
joining grouped subqueries back to the table was a nested loop on SQLite
(quadratic in the names: 3,000 names took 2.3 s, 30,000 minutes)."""

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
