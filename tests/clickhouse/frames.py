"""Storage-shaped record frames (tests/analytics) into ClickHouse, with their own
ids, so results compare id for id with the relational pass's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl

from service.clickhouse import records as ch_records
from service.clickhouse.client import ClickHouse
from service.clickhouse.derive import derive
from service.usage_row import USAGE_COLUMNS


class GivenIds:
    """An id source that hands out the frame's own ids, in order."""

    def __init__(self, ids: list[int]) -> None:
        self._ids = ids

    def take(self, n: int, now_us: int | None = None) -> np.ndarray:
        out, self._ids = self._ids[:n], self._ids[n:]
        return np.array(out, dtype=np.int64)


def insert_frame(ch: ClickHouse, frame: pl.DataFrame, batch: int = 20_000) -> None:
    """Every row of `frame` as a stored record: request_id `r<id>`, received at 0,
    with the rows a pass derives from it (service.clickhouse.derive)."""
    rows = frame.to_dicts()
    for start in range(0, len(rows), batch):
        chunk = rows[start : start + batch]
        values = [frame_values(r) for r in chunk]
        columns = ch_records.usage_batch(values)
        assert columns is not None
        ch_records.insert_batches(ch, [columns], GivenIds([int(r["id"]) for r in chunk]))  # type: ignore[arg-type]
    if rows:
        derive(ch, min(r["id"] for r in rows) - 1, max(r["id"] for r in rows))


def frame_values(row: dict[str, Any]) -> tuple[Any, ...]:
    full = {c: row.get(c) for c in USAGE_COLUMNS}
    full["request_id"] = f"r{row['id']}"
    full["received_us"] = 0
    full["service"] = row.get("service") or "chat"
    full["cached_tokens"] = row.get("cached_tokens") or 0
    full["cache_write_tokens"] = 0
    return tuple(full[c] for c in USAGE_COLUMNS)


def annotate_from(frame: pl.DataFrame) -> Callable[[pl.DataFrame], pl.DataFrame]:
    """The caching profile columns each record of `frame` carries (the reference's
    per-record min_prompt_tokens and ttl_s), joined on id."""
    columns = [c for c in ("min_prompt_tokens", "ttl_s") if c in frame.columns]
    profile = frame.select("id", *columns)

    def annotate(rows: pl.DataFrame) -> pl.DataFrame:
        out = rows.join(profile, on="id", how="left", maintain_order="left")
        for name, dtype in (("min_prompt_tokens", pl.Int64), ("ttl_s", pl.Float64)):
            if name not in out.columns:
                out = out.with_columns(pl.lit(None, dtype).alias(name))
        return out

    return annotate
