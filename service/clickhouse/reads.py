"""The repository's reads of usage records, answered from ClickHouse: each function
here is the ClickHouse side of the `service.repository` function of the same name
(those dispatch here when the session carries a client; see
service.clickhouse.clickhouse_of). Every read is `FINAL`, so a request stored twice
by a racing retry counts once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import orjson
import polars as pl

from service.clickhouse.client import ClickHouse, quote

if TYPE_CHECKING:
    from service.repository.sessions import CallFilter

_BLOCK_SCHEMA: dict[str, pl.DataType] = {
    "id": pl.Int64(),
    "ts_us": pl.Int64(),
    "model": pl.String(),
    "prompt_tokens": pl.Int64(),
    "block_size": pl.Int64(),
    "block_hashes": pl.List(pl.Int64()),
}


def _where(*conditions: str | None) -> str:
    kept = [c for c in conditions if c]
    return " AND ".join(kept) if kept else "1"


def _packed(frame: pl.DataFrame) -> pl.DataFrame:
    """block_hashes as the relational blobs (little-endian int64), which the
    capacity replay reads."""
    blobs = [
        pl.Series(h, dtype=pl.Int64).to_numpy().astype("<i8").tobytes()
        for h in frame["block_hashes"].to_list()
    ]
    return frame.with_columns(pl.Series("block_hashes", blobs, dtype=pl.Binary))


def load_block_frame(
    ch: ClickHouse, *, model: str | None, from_us: int | None, to_us: int | None, limit: int = 0
) -> pl.DataFrame:
    """Requests with block hashes, in (ts_us, id) order; `limit`: only the newest."""
    where = _where(
        "has_blocks = 1",
        None if model is None else f"model = {quote(model)}",
        None if from_us is None else f"ts_us >= {int(from_us)}",
        None if to_us is None else f"ts_us < {int(to_us)}",
    )
    columns = ", ".join(_BLOCK_SCHEMA)
    if limit:
        sql = (
            f"SELECT {columns} FROM usage_records FINAL WHERE {where} "
            f"ORDER BY ts_us DESC, id DESC LIMIT {int(limit)}"
        )
    else:
        sql = f"SELECT {columns} FROM usage_records FINAL WHERE {where}"
    frame = ch.query(sql, _BLOCK_SCHEMA).sort(["ts_us", "id"])
    return _packed(frame)


def distinct_models(ch: ClickHouse, limit: int) -> list[str]:
    frame = ch.query(
        f"SELECT DISTINCT model FROM usage_records LIMIT {int(limit)}", {"model": pl.String()}
    )
    return frame["model"].to_list()


def newest_id(ch: ClickHouse) -> int:
    return int(ch.query("SELECT max(id) AS m FROM usage_records")["m"][0] or 0)


def _scalar(ch: ClickHouse, sql: str) -> int | None:
    frame = ch.query(sql)
    if frame.height == 0 or frame.row(0)[0] is None or int(frame.row(0)[1]) == 0:
        return None
    return int(frame.row(0)[0])


def replica_ts(ch: ClickHouse, service: str, model: str, replica: str, bound: str) -> int | None:
    """min or max ts of a replica's records (`bound`: the ts condition; min when it
    is a lower bound)."""
    agg = "min" if ">=" in bound else "max"
    where = _where(
        f"service = {quote(service)}", f"model = {quote(model)}", f"replica = {quote(replica)}"
    )
    return _scalar(
        ch, f"SELECT {agg}(ts_us) AS v, count() AS n FROM usage_records WHERE {where} AND {bound}"
    )


def deploy_first_record(
    ch: ClickHouse, service: str, deploy: str, from_us: int
) -> tuple[int, str] | None:
    frame = ch.query(
        f"""SELECT ts_us, model FROM usage_records FINAL
            WHERE service = {quote(service)} AND deploy = {quote(deploy)}
              AND ts_us >= {int(from_us)}
            ORDER BY ts_us, id LIMIT 1""",
        {"ts_us": pl.Int64(), "model": pl.String()},
    )
    return None if frame.height == 0 else (int(frame["ts_us"][0]), str(frame["model"][0]))


def segment_rows(
    ch: ClickHouse,
    service: str,
    model: str,
    from_us: int,
    to_us: int,
    group: tuple[str, str] | None,
) -> list[tuple[int, Any]]:
    """(ts_us, segments) of the records with segments: what
    `segment_variants_per_hour` counts."""
    if group is not None and group[0] not in ("scenario", "tenant", "deploy"):
        raise ValueError(f"not a group field: {group[0]}")
    where = _where(
        f"service = {quote(service)}",
        f"model = {quote(model)}",
        f"ts_us >= {int(from_us)}",
        f"ts_us < {int(to_us)}",
        "isNotNull(segments)",
        None if group is None else f"{group[0]} = {quote(group[1])}",
    )
    frame = ch.query(
        f"SELECT ts_us, segments FROM usage_records FINAL WHERE {where}",
        {"ts_us": pl.Int64(), "segments": pl.String()},
    )
    return [(ts, orjson.loads(text)) for ts, text in frame.iter_rows()]


def session_sums(
    ch: ClickHouse,
    service: str,
    model: str,
    from_us: int,
    to_us: int,
    group: tuple[str, str] | None,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Prompt and cached tokens per session (a record without one is its own): what
    `service.detection.evidence` weighs a drop's opening hours by."""
    if group is not None and group[0] not in ("scenario", "tenant", "deploy"):
        raise ValueError(f"not a group field: {group[0]}")
    where = _where(
        f"service = {quote(service)}",
        f"model = {quote(model)}",
        f"ts_us >= {int(from_us)}",
        f"ts_us < {int(to_us)}",
        None if group is None else f"{group[0]} = {quote(group[1])}",
    )
    frame = ch.query(
        "SELECT toFloat64(sum(prompt_tokens)) AS prompt, toFloat64(sum(cached_tokens)) AS cached "
        f"FROM usage_records FINAL WHERE {where} "
        "GROUP BY ifNull(session_id, request_id)",
        {"prompt": pl.Float64(), "cached": pl.Float64()},
    )
    return frame["prompt"].to_numpy(), frame["cached"].to_numpy()


def newest_record(
    ch: ClickHouse, service: str, model: str, to_us: int | None
) -> tuple[str | None, float | None] | None:
    where = _where(
        f"service = {quote(service)}",
        f"model = {quote(model)}",
        None if to_us is None else f"ts_us < {int(to_us)}",
    )
    frame = ch.query(
        f"SELECT provider, cache_ttl_s FROM usage_records WHERE {where} "
        "ORDER BY ts_us DESC LIMIT 1",
        {"provider": pl.String(), "cache_ttl_s": pl.Float64()},
    )
    return None if frame.height == 0 else (frame["provider"][0], frame["cache_ttl_s"][0])


def capacity_totals(
    ch: ClickHouse, model: str | None, from_us: int | None, to_us: int | None
) -> pl.DataFrame:
    """Per block size, the requests with blocks of a model's range, their prompt
    tokens, the tokens their blocks cover (the sampled curve's exact totals) and
    their block uses (what sets the sample's rate)."""
    where = _range(model, from_us, to_us)
    return ch.query(
        f"""SELECT ifNull(block_size, 0) AS block_size, count() AS requests,
                   sum(prompt_tokens) AS prompt_total,
                   sum(least(prompt_tokens, length(block_hashes) * ifNull(block_size, 0)))
                       AS covered_total,
                   sum(length(block_hashes)) AS uses
            FROM usage_records FINAL WHERE {where} AND length(block_hashes) > 0
            GROUP BY block_size""",
        {"block_size": pl.Int64(), "requests": pl.Int64(), "prompt_total": pl.Int64(),
         "covered_total": pl.Int64(), "uses": pl.Int64()},
    )  # fmt: skip


def sampled_uses(
    ch: ClickHouse, model: str | None, from_us: int | None, to_us: int | None, predicate: str
) -> pl.DataFrame:
    """The block uses whose key passes `predicate` (a SHARDS sample), in replay
    order ((ts, id), then position), with the tokens each block covers. Read from
    the records' own arrays, as the analytics pass does (pass_sql `uses_of`):
    the curve covers records the pass has not read yet."""
    where = _range(model, from_us, to_us)
    return ch.query(
        f"""SELECT id, ts_us, model, key, toInt64(position - 1) AS pos,
                   least(bs, greatest(0, prompt_tokens - pos * bs)) AS tokens
            FROM (
                SELECT id, ts_us, model, block_hashes, prompt_tokens,
                       ifNull(block_size, 0) AS bs
                FROM usage_records FINAL WHERE {where} AND length(block_hashes) > 0
            )
            ARRAY JOIN block_hashes AS key, arrayEnumerate(block_hashes) AS position
            WHERE {predicate}
            ORDER BY ts_us, id, pos""",
        {"id": pl.Int64(), "ts_us": pl.Int64(), "model": pl.String(), "key": pl.Int64(),
         "pos": pl.Int64(), "tokens": pl.Int64()},
    )  # fmt: skip


def _range(model: str | None, from_us: int | None, to_us: int | None) -> str:
    return _where(
        None if model is None else f"model = {quote(model)}",
        None if from_us is None else f"ts_us >= {int(from_us)}",
        None if to_us is None else f"ts_us < {int(to_us)}",
    )


def session_calls(
    ch: ClickHouse, where: CallFilter, schema: dict[str, pl.DataType]
) -> pl.DataFrame:
    """The calls with a session id that `where` picks, with the columns of `schema`."""
    conditions = [
        f"{name} = {quote(value)}"
        for name in ("service", "model", "tenant")
        if (value := getattr(where, name)) is not None
    ]
    if where.from_us is not None:
        conditions.append(f"ts_us >= {int(where.from_us)}")
    if where.to_us is not None:
        conditions.append(f"ts_us < {int(where.to_us)}")
    return ch.query(
        f"SELECT {', '.join(schema)} FROM usage_records FINAL "
        f"WHERE {_where('session_id IS NOT NULL', *conditions)}",
        schema,
    )
