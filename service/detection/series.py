"""Minute rollups of one (service, model) -> one series per detection bucket, and
the before/after figures of a stretch of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from service.analytics.definitions import (
    CAUSES,
    RATIOS,
    REWARM_TOKEN_COLUMNS,
    SUM_COLUMNS,
    USD_COLUMNS,
    ratios,
)

I64 = npt.NDArray[np.int64]
_NUMPY_TYPE = {c: np.float64 if c in USD_COLUMNS else np.int64 for c in SUM_COLUMNS}


@dataclass(frozen=True)
class Series:
    """Non-empty detection buckets only (gaps are skipped, not zero): `bucket_us` is
    each bucket's start; `sums` holds the rollup sums per bucket; `distinct_prefixes`
    and `replicas` are distinct counts within each bucket."""

    bucket_us: I64
    sums: dict[str, npt.NDArray[Any]]
    distinct_prefixes: I64
    replicas: I64

    def __len__(self) -> int:
        return len(self.bucket_us)

    @property
    def hit_rate(self) -> npt.NDArray[np.float64]:
        """RATIOS["hit_rate"] per bucket (0 where a bucket has no prompt tokens;
        `build_series` keeps none)."""
        hit_rate = RATIOS["hit_rate"]
        return self.sums[hit_rate.numerator] / np.maximum(self.sums[hit_rate.denominator], 1)

    @property
    def weight(self) -> npt.NDArray[np.float64]:
        return self.sums["prompt_tokens"].astype(np.float64)

    @property
    def wait(self) -> npt.NDArray[np.float64]:
        """The callers' summed wait for the first token per bucket (ms; 0 without
        `ttft_ms`): how busy a bucket was for callers that wait for each answer."""
        return self.sums["ttft_ms_total"].astype(np.float64)


def build_series(rollups: pl.DataFrame, prefixes: pl.DataFrame, bucket_s: int) -> Series:
    bucket_us = bucket_s * 1_000_000
    out = pl.col("bucket_us") // bucket_us * bucket_us
    sums = (
        rollups.with_columns(out.alias("b"))
        .group_by("b")
        .agg(
            pl.col(SUM_COLUMNS).sum(),
            pl.col("replica").filter(pl.col("replica") != "").n_unique().alias("replicas"),
        )
        .filter(pl.col("prompt_tokens") > 0)
        .sort("b")
    )
    distinct = (
        prefixes.with_columns(out.alias("b"))
        .group_by("b")
        .agg(pl.col("first_key").n_unique().alias("distinct"))
    )
    sums = sums.join(distinct, on="b", how="left").with_columns(pl.col("distinct").fill_null(0))
    return Series(
        bucket_us=sums["b"].to_numpy().astype(np.int64),
        sums={c: sums[c].to_numpy().astype(_NUMPY_TYPE[c]) for c in SUM_COLUMNS},
        distinct_prefixes=sums["distinct"].to_numpy().astype(np.int64),
        replicas=sums["replicas"].to_numpy().astype(np.int64),
    )


@dataclass(frozen=True)
class Stretch:
    """Figures of buckets [start, end) of a series, each a ratio of summed tokens."""

    hit_rate: float
    cacheable_fraction: float | None
    rewarm_share: float
    unique_prefix_ratio: float | None
    history_rewrite_share: float | None
    opening_cacheable_fraction: float | None
    rewarm_tokens: dict[str, int]
    replicas: int
    #: What a regression's cost is computed from (contract section 5).
    prompt_tokens: int = 0
    spend_usd: float = 0.0
    priced_requests: int = 0

    def contract_view(self) -> dict[str, float | None]:
        """The four figures the contract's regression object carries."""
        return {
            "hit_rate": _round(self.hit_rate),
            "cacheable_fraction": _round(self.cacheable_fraction),
            "rewarm_share": _round(self.rewarm_share),
            "unique_prefix_ratio": _round(self.unique_prefix_ratio),
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def stretch(series: Series, start: int, end: int) -> Stretch:
    total: dict[str, float] = {
        name: (float if name in USD_COLUMNS else int)(values[start:end].sum())
        for name, values in series.sums.items()
    }
    total["distinct_prefixes"] = int(series.distinct_prefixes[start:end].sum())
    figures = ratios(total)
    replicas = series.replicas[start:end]
    return Stretch(
        hit_rate=figures["hit_rate"] or 0.0,
        cacheable_fraction=figures["cacheable_fraction"],
        rewarm_share=figures["rewarm_share"] or 0.0,
        unique_prefix_ratio=figures["unique_prefix_ratio"],
        history_rewrite_share=figures["history_rewrite_share"],
        opening_cacheable_fraction=figures["opening_cacheable_fraction"],
        rewarm_tokens={c: int(total[n]) for c, n in zip(CAUSES, REWARM_TOKEN_COLUMNS, strict=True)},
        # The typical number serving (median over buckets), not a max a blip could set.
        replicas=int(np.median(replicas)) if len(replicas) else 0,
        prompt_tokens=int(total["prompt_tokens"]),
        spend_usd=float(total["spend_usd"]),
        priced_requests=int(total["priced_requests"]),
    )
