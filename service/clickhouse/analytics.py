"""Per-request values of contract section 4 for records in ClickHouse.

The block-level work is SQL (`service.clickhouse.pass_sql`): every use's previous
carrier, each request's leading run of seen blocks and its deepest seen block,
the session predecessor's shared leading blocks, and, for the rewarms that need
it, whether their own replica carried that block. What it hands back is one row
per request. The formulas on those rows (cacheable and rewarm tokens, the rewarm
threshold, the order of causes, history rewrites, hits) are the relational pass's
own functions (`service.analytics.requests`, `service.analytics.sessions`), so the
two passes cannot define a metric twice.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import polars as pl

from service.analytics._arrays import ints
from service.analytics.requests import (
    first_causes,
    profile_of,
    replica_causes,
    results_frame,
    reuse_tokens,
)
from service.analytics.sessions import rewrite_need
from service.clickhouse import pass_sql
from service.clickhouse.client import ClickHouse
from service.clickhouse.pass_sql import Scope
from service.repository.analytics import USAGE_FRAME_SCHEMA

#: What `reuse_sql` gives besides the record columns (ClickHouse fills 0 where a
#: LEFT JOIN finds nothing).
_PASS_SCHEMA: dict[str, pl.DataType] = {
    **{name: USAGE_FRAME_SCHEMA[name]() for name in pass_sql.RECORD_COLUMNS},
    "n_blocks": pl.Int64(),
    "has_blocks": pl.UInt8(),
    "first_block": pl.Int64(),
    "p_seen": pl.Int64(),
    "p_prev_ts": pl.Int64(),
    "p_prev_ttft": pl.Float64(),
    "s_has_prev": pl.Int64(),
    "s_prev_prompt": pl.Int64(),
    "s_prev_bs": pl.Int64(),
    "s_prev_blocks": pl.Int64(),
    "s_common": pl.Int64(),
    "s_switched": pl.Int64(),
}

#: What `blocks_sql` gives per request with blocks (0 for a request without).
_BLOCKS_SCHEMA: dict[str, pl.DataType] = {
    "id": pl.Int64(),
    "run": pl.Int64(),
    "deep_prev_ts": pl.Int64(),
    "deep_prev_ttft": pl.Float64(),
    "deep_key": pl.Int64(),
    "exact": pl.UInt8(),
}

Annotate = Callable[[pl.DataFrame], pl.DataFrame]


def compute(
    ch: ClickHouse, scope: Scope, shards: int, annotate: Annotate
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(records, results) of the records `scope` computes, in (ts_us, id) order.
    `records` has the columns of the relational pass's record frame (block_hashes
    only says whether the record gave any: an empty blob stands for the hashes)
    plus the caching profile's columns from `annotate`; `results` has RESULT_SCHEMA."""
    ch.command("TRUNCATE TABLE pass_uses")
    ch.command("TRUNCATE TABLE pass_candidates")
    for shard in range(shards):
        ch.command(pass_sql.uses_sql(scope, shard, shards))
    # The columns named: 18.16's `SELECT *` of a join adds the right side's key.
    named = f"SELECT {', '.join(_PASS_SCHEMA)} FROM ({pass_sql.reuse_sql(scope)})"
    rows = ch.query(named, _PASS_SCHEMA).join(_blocks(ch), on="id", how="left")
    rows = rows.with_columns(pl.col(c).fill_null(0) for c in ("run", "deep_prev_ts", "deep_key"))
    rows = annotate(rows.sort(["ts_us", "id"]).with_columns(_float_nan()))
    results = _results(ch, scope, rows)
    records = rows.select(
        *[c for c in rows.columns if c not in _PASS_SCHEMA or c in pass_sql.RECORD_COLUMNS],
    ).with_columns(
        pl.when(rows["has_blocks"] == 1).then(pl.lit(b"")).otherwise(None).alias("block_hashes")
    )
    return records, results


def _blocks(ch: ClickHouse) -> pl.DataFrame:
    """The block columns of every request with blocks: by aggregates, or by their
    definition when a request's seen flags ask for it (pass_sql.blocks_sql)."""
    blocks = ch.query(pass_sql.blocks_sql(), _BLOCKS_SCHEMA)
    if not blocks["exact"].cast(pl.Boolean).all():
        blocks = ch.query(pass_sql.blocks_exact_sql(), _BLOCKS_SCHEMA)
    return blocks.drop("exact")


def _float_nan() -> list[pl.Expr]:
    """The servers that answer in JSON write NaN as null."""
    return [pl.col(c).fill_null(np.nan) for c in ("deep_prev_ttft", "p_prev_ttft")]


def _results(ch: ClickHouse, scope: Scope, rows: pl.DataFrame) -> pl.DataFrame:
    ts, ids = ints(rows["ts_us"]), ints(rows["id"])
    counts = ints(rows["n_blocks"])
    has_blocks = counts > 0
    has_prefix = rows["prefix_key"].is_not_null().to_numpy()
    run = np.where(has_blocks, ints(rows["run"]), np.where(has_prefix, ints(rows["p_seen"]), 0))
    cacheable, rewarm_tokens, is_rewarm = reuse_tokens(rows, counts, has_prefix, run)
    rw = np.flatnonzero(is_rewarm)
    cause = np.zeros(rows.height, dtype=np.int8)
    gaps = np.zeros(rows.height, dtype=np.int64)
    if len(rw):
        cause[rw], gaps[rw] = _causes(ch, scope, rows.filter(pl.Series(is_rewarm)), rw, rows)
    rewrite, opening, shared, switched = _sessions(rows, counts)
    return results_frame(
        rows,
        ids=ids,
        ts=ts,
        has_blocks=has_blocks,
        first_block=ints(rows["first_block"]),
        seen_blocks=run,
        cacheable=cacheable,
        rewarm_tokens=rewarm_tokens,
        cause=cause,
        gap_us=gaps,
        rewrite=rewrite,
        opening=opening,
        shared=shared,
        switched=switched,
    )


def _causes(
    ch: ClickHouse, scope: Scope, rewarms: pl.DataFrame, rw: np.ndarray, rows: pl.DataFrame
) -> tuple[np.ndarray, np.ndarray]:
    """Cause codes and gaps of the rewarms (rows `rw`): the first causes from the
    deepest seen block's carrier, then the replica question asked of ClickHouse."""
    blocks = ints(rewarms["n_blocks"]) > 0
    prev_ts = np.where(blocks, ints(rewarms["deep_prev_ts"]), ints(rewarms["p_prev_ts"]))
    prev_ttft = np.where(
        blocks, rewarms["deep_prev_ttft"].to_numpy(), rewarms["p_prev_ttft"].to_numpy()
    ).astype(np.float64)
    gap = ints(rewarms["ts_us"]) - prev_ts
    has_replica = rewarms["replica"].is_not_null().to_numpy()
    cause = first_causes(profile_of(rows, rw), gap, prev_ttft, has_replica)
    ask = cause == 0
    if ask.any():
        asked = rewarms.filter(pl.Series(ask))
        kind = np.where(blocks[ask], 0, 1).astype(np.uint8)
        key = np.where(blocks[ask], ints(asked["deep_key"]), ints(asked["prefix_key"]))
        candidates = pl.DataFrame(
            {
                "id": asked["id"],
                "ts_us": asked["ts_us"],
                "model": asked["model"],
                "kind": kind,
                "key": key,
                "replica": asked["replica"],
            }
        )
        ch.insert("pass_candidates", candidates)
        on = ch.query(pass_sql.same_replica_sql(scope), {"id": pl.Int64()})["id"]
        cause[ask] = replica_causes(asked["id"].is_in(on.implode()).to_numpy())
    return cause, gap


def _sessions(
    rows: pl.DataFrame, counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """history_rewrite, is_opening, the shared blocks and the model switches
    (service.analytics.sessions' definitions: `s_common` counts up to the shorter
    request, the pass up to k)."""
    in_session = rows["session_id"].is_not_null().to_numpy()
    has_prev = in_session & (ints(rows["s_has_prev"]) > 0)
    need = rewrite_need(ints(rows["s_prev_prompt"]), ints(rows["s_prev_bs"]))
    judged = has_prev & (counts > 0) & (ints(rows["s_prev_blocks"]) > 0)
    common = ints(rows["s_common"])
    rewrite = judged & (common < need)
    switched = has_prev & (ints(rows["s_switched"]) > 0)
    return rewrite, ~has_prev, np.where(judged, np.minimum(common, need), -1), switched
