"""Ingest into a ClickHouse deployment: concurrent batches with shared request_ids
are counted exactly (defect 5), history spread over more than a hundred days goes
in and is counted (defect 2: current ClickHouse refuses an insert into more than 100
partitions), and the duplicate check reads the batch's hours, not the table."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import orjson
import polars as pl
import pytest
from fastapi.testclient import TestClient

from service.clickhouse import records as ch_records
from service.clickhouse.client import ClickHouse
from service.clickhouse.records import block_lists
from service.ingest.hashing import hash_key, pack_block_hashes
from service.timeunits import HOUR_US
from tests.clickhouse.frames import GivenIds, frame_values, insert_frame
from tests.clickhouse.test_api import deployment, headers, record

__all__ = ["deployment"]  # a fixture, used by name


def test_concurrent_duplicate_batches_are_counted_exactly(deployment: TestClient) -> None:
    ingest = headers(deployment, "ingest")
    rng = random.Random(7)
    distinct = 400
    bodies = []
    for _ in range(12):
        ids = rng.sample(range(distinct), 150)
        bodies.append(b"\n".join(orjson.dumps(record(i)) for i in ids))
    sent = sum(body.count(b"\n") + 1 for body in bodies)
    with ThreadPoolExecutor(6) as pool:
        answers = list(
            pool.map(lambda b: deployment.post("/v1/usage", content=b, headers=ingest), bodies)
        )
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    accepted = sum(a.json()["accepted"] for a in answers)
    duplicates = sum(a.json()["duplicates"] for a in answers)
    covered = len({i for body in bodies for i in _ids(body)})
    assert (accepted, accepted + duplicates) == (covered, sent)
    metrics = deployment.get("/v1/metrics", headers=headers(deployment, "read")).json()
    assert metrics["totals"]["requests"] == covered


def _ids(body: bytes) -> list[str]:
    return [orjson.loads(line)["request_id"] for line in body.splitlines()]


def test_history_over_a_hundred_and_one_days(deployment: TestClient) -> None:
    day0 = datetime(2025, 1, 1, 12, tzinfo=UTC)
    body = b"\n".join(
        orjson.dumps(record(i, ts=(day0 + timedelta(days=i)).isoformat())) for i in range(101)
    )
    answer = deployment.post("/v1/usage", content=body, headers=headers(deployment, "ingest"))
    assert answer.json()["accepted"] == 101
    read = headers(deployment, "read")
    for _ in range(2):  # the pass, then a read that finds nothing new
        metrics = deployment.get(
            "/v1/metrics", params={"from": "2025-01-01T00:00:00Z"}, headers=read
        )
        assert metrics.status_code == 200, metrics.text
        assert metrics.json()["totals"]["requests"] == 101


@pytest.mark.parametrize("backend", ["chdb", "server"])
def test_the_duplicate_check_reads_the_batch_hours(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """100 hours of 2,000 records; a check of 1,000 ids of one hour reads that
    hour's granules, two at most (`max_rows_to_read` fails the query otherwise)."""
    ch: ClickHouse = request.getfixturevalue(backend if backend == "server" else "chdb")
    n, hours = 200_000, 100
    t0 = 1_767_225_600_000_000
    ts = [t0 + (i * hours * HOUR_US) // n for i in range(n)]
    frame = pl.DataFrame(
        {"id": range(1, n + 1), "ts_us": ts, "model": ["m"] * n, "prompt_tokens": [10] * n}
    )
    insert_frame(ch, frame, batch=50_000)
    hour = [i for i in range(1, n + 1) if (ts[i - 1] - t0) // HOUR_US == 7]
    keys = [(f"r{i}", ts[i - 1]) for i in hour[:50]]
    keys += [(f"new{i}", t0 + 7 * HOUR_US) for i in range(950)]
    sql = ch_records.stored_sql(keys) + " SETTINGS max_rows_to_read = 20000"
    ids = [r for r, _ in keys]
    found = ch.query_in(sql, ids, {"request_id": pl.String()})["request_id"].to_list()
    assert sorted(found) == sorted(r for r, _ in keys[:50])


@pytest.mark.parametrize("backend", ["chdb", "server"])
def test_a_group_stores_the_first_copy_of_each_request(
    backend: str, request: pytest.FixtureRequest
) -> None:
    """The batches of one group commit (`insert_batches`): a request_id stored
    before, or in an earlier batch of the group, is a duplicate; the rows go in
    in order, with the ids in that order, as one insert."""
    ch: ClickHouse = request.getfixturevalue(backend if backend == "server" else "chdb")
    t0 = 1_767_225_600_000_000

    def batch(model: str, names: list[str]) -> pl.DataFrame:
        rows = [{"id": 0, "ts_us": t0, "model": model, "prompt_tokens": 10}] * len(names)
        values = [(name, *v[1:]) for name, v in zip(names, map(frame_values, rows), strict=True)]
        frame = ch_records.usage_batch(values)
        assert frame is not None
        return frame

    assert ch_records.insert_batches(ch, [batch("m0", ["a", "b"])], GivenIds([1, 2])) == [2]  # type: ignore[arg-type]
    group = [batch("m1", ["b", "c", "d"]), batch("m2", ["d", "e"]), batch("m3", ["a", "c"])]
    assert ch_records.insert_batches(ch, group, GivenIds([3, 4, 5])) == [2, 1, 0]  # type: ignore[arg-type]
    stored = ch.query("SELECT id, request_id, model FROM usage_records FINAL ORDER BY id")
    assert stored.rows() == [
        (1, "a", "m0"),
        (2, "b", "m0"),
        (3, "c", "m1"),
        (4, "d", "m1"),
        (5, "e", "m2"),
    ]


def test_block_lists_from_packed_hashes() -> None:
    """The Array(Int64) column of a batch: a record without hashes (None) or with
    none (an empty blob) has an empty list; the others their hashes in order."""
    blobs = [pack_block_hashes([1, 2, 3]), None, b"", pack_block_hashes(["ab", -5])]
    lists = block_lists(blobs)
    assert lists.dtype == pl.List(pl.Int64)
    assert lists.to_list() == [[1, 2, 3], [], [], [hash_key("ab"), -5]]
    assert block_lists([]).to_list() == []
