"""repository.usage: rows of different shapes in one batch are stored exactly, in
body order. On SQLite each run of rows with the same absent fields goes in with
its own statement; these tests pin that the grouping loses, reorders and alters
nothing."""

from typing import Any

import orjson
from sqlalchemy import select
from sqlalchemy.orm import Session

from service.models import UsageRecord
from service.repository import USAGE_COLUMNS, insert_usage_values

COLUMN = {name: i for i, name in enumerate(USAGE_COLUMNS)}


def row(request_id: str, **fields: Any) -> tuple[Any, ...]:
    values: list[Any] = [None] * len(USAGE_COLUMNS)
    base = {"request_id": request_id, "ts_us": 1_700_000_000_000_000, "received_us": 1,
            "service": "svc", "model": "m", "prompt_tokens": 100, "cached_tokens": 0,
            "cache_write_tokens": 0}  # fmt: skip
    for name, value in {**base, **fields}.items():
        values[COLUMN[name]] = value
    return tuple(values)


def as_read(values: tuple[Any, ...]) -> tuple[Any, ...]:
    """The JSON columns go in as text and come back decoded."""
    return tuple(
        orjson.loads(v) if v is not None and USAGE_COLUMNS[i] in {"segments", "attributes"} else v
        for i, v in enumerate(values)
    )


def stored(session: Session) -> list[tuple[Any, ...]]:
    columns = [getattr(UsageRecord, name) for name in USAGE_COLUMNS]
    return [tuple(r) for r in session.execute(select(*columns).order_by(UsageRecord.id))]


def test_rows_of_alternating_shapes_are_stored_exactly_in_body_order(session: Session) -> None:
    rows = [
        row("a", replica="pod-1", block_size=16, block_hashes=b"\x01" * 16),
        row("b", deploy="v2"),  # as many Nones as the next, at other positions
        row("c", replica="pod-2"),
        row("d", replica="pod-3"),
        row(
            "e",
            completion_tokens=7,
            ttft_ms=120.5,
            latency_ms=900.0,
            session_id="s",
            cache_key="k",
            tenant="t",
            prefix_hash="p",
            prefix_key=-5,
            prefix_tokens=64,
            segments='[{"name": "system", "tokens": 64}]',
            attributes='{"route": "/x"}',
        ),
        row("f"),
        row("g", replica="pod-4"),
    ]
    assert insert_usage_values(session, rows) == len(rows)
    assert stored(session) == [as_read(r) for r in rows]


def test_rows_already_stored_count_as_not_inserted_in_every_run(session: Session) -> None:
    assert insert_usage_values(session, [row("x", replica="r"), row("y")]) == 2
    again = [row("x", replica="r"), row("z", deploy="d"), row("y"), row("w")]
    assert insert_usage_values(session, again) == 2
    assert [r[0] for r in stored(session)] == ["x", "y", "z", "w"]


def test_a_large_body_of_mixed_shapes_keeps_every_row_and_its_order(session: Session) -> None:
    """1,234 rows: multi-row statements of 100 and 10 rows and a one-by-one tail, in
    runs of changing shape."""
    rows = [
        row(f"r{i:05d}", replica=f"pod-{i % 3}" if (i // 150) % 2 else None, ttft_ms=float(i))
        for i in range(1_234)
    ]
    assert insert_usage_values(session, rows) == len(rows)
    assert stored(session) == rows
    assert insert_usage_values(session, [*rows[::7], row("new")]) == 1
