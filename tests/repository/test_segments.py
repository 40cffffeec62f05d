"""service.repository.segments on the real database: the row of the names not kept
(`segments.FOLDED_NAME`) is never read as a segment of its own."""

import polars as pl
from sqlalchemy.orm import Session

from service.repository import segments as segments_repo
from service.rollups import segments

HOUR = segments.HOUR_US


def _row(name: str, hash_: str, requests: int, folded: int) -> dict[str, object]:
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
