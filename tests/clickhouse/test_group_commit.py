"""The group commit's protocol with threads and a fake `lead` (its use by the
ingest, on real servers: test_ingest.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import polars as pl
import pytest

from service.clickhouse.group_commit import GroupCommit
from tests.conftest import is_postgres_run

pytestmark = pytest.mark.skipif(is_postgres_run(), reason="touches no database: run once")


def _batch(name: str, rows: int = 1) -> pl.DataFrame:
    return pl.DataFrame({"request_id": [f"{name}-{i}" for i in range(rows)]})


class Recorder:
    """A `lead` that records each group's batches and holds the first group until
    `release` is set (so later batches queue behind it)."""

    def __init__(self, fail: bool = False) -> None:
        self.groups: list[list[str]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self.fail = fail

    def __call__(self, batches: Sequence[pl.DataFrame]) -> list[int]:
        self.groups.append([b["request_id"][0].split("-")[0] for b in batches])
        self.entered.set()
        assert self.release.wait(10)
        if self.fail:
            raise ConnectionError("ClickHouse went away")
        return [b.height for b in batches]


def _submit_in_thread(
    group: GroupCommit, batch: pl.DataFrame, lead: Recorder, out: dict
) -> threading.Thread:
    def run() -> None:
        try:
            out[batch["request_id"][0]] = group.submit(batch, lead)
        except Exception as exc:  # the test reads it
            out[batch["request_id"][0]] = exc

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _wait_queued(group: GroupCommit, n: int) -> None:
    deadline = time.monotonic() + 10
    while len(group._queue) < n:
        assert time.monotonic() < deadline, "batches never queued"
        time.sleep(0.001)


def test_a_lone_batch_goes_in_at_once() -> None:
    lead = Recorder()
    lead.release.set()
    started = time.monotonic()
    assert GroupCommit(linger_s=5).submit(_batch("a", 3), lead) == 3
    assert lead.groups == [["a"]]
    assert time.monotonic() - started < 1  # no linger: nothing was arriving


def test_batches_queued_behind_an_insert_go_in_together_in_arrival_order() -> None:
    group, lead, out = GroupCommit(), Recorder(), {}
    first = _submit_in_thread(group, _batch("a"), lead, out)
    assert lead.entered.wait(10)
    others = []
    for name in "bcd":
        others.append(_submit_in_thread(group, _batch(name, 2), lead, out))
        _wait_queued(group, len(others))
    lead.release.set()
    for thread in [first, *others]:
        thread.join(10)
    assert lead.groups == [["a"], ["b", "c", "d"]]
    assert out == {"a-0": 1, "b-0": 2, "c-0": 2, "d-0": 2}


def test_a_group_stops_at_max_rows() -> None:
    group, lead, out = GroupCommit(max_rows=5), Recorder(), {}
    threads = [_submit_in_thread(group, _batch("a"), lead, out)]
    assert lead.entered.wait(10)
    for i, name in enumerate("bcde"):
        threads.append(_submit_in_thread(group, _batch(name, 2), lead, out))
        _wait_queued(group, i + 1)
    threads.append(_submit_in_thread(group, _batch("f", 9), lead, out))
    _wait_queued(group, 5)
    lead.release.set()
    for thread in threads:
        thread.join(10)
    # 2 + 2 fit in 5, a third would not; a batch over the bound goes alone.
    assert lead.groups == [["a"], ["b", "c"], ["d", "e"], ["f"]]
    assert out["f-0"] == 9


def test_a_failed_insert_fails_every_batch_of_its_group_and_the_next_goes_on() -> None:
    group, lead, out = GroupCommit(), Recorder(fail=True), {}
    first = _submit_in_thread(group, _batch("a"), lead, out)
    assert lead.entered.wait(10)
    second = _submit_in_thread(group, _batch("b"), lead, out)
    _wait_queued(group, 1)
    lead.release.set()
    first.join(10)
    second.join(10)
    assert all(isinstance(out[k], ConnectionError) for k in ("a-0", "b-0"))
    assert out["a-0"] is not out["b-0"]  # each thread raises its own copy
    lead.fail = False
    assert group.submit(_batch("c"), lead) == 1


def test_a_leader_waits_for_a_batch_being_built_up_to_the_linger() -> None:
    group, out = GroupCommit(linger_s=10), {}
    lead = Recorder()
    lead.release.set()
    building, built = threading.Event(), threading.Event()

    def arriving_later() -> None:
        with group.arriving():
            building.set()
            assert built.wait(10)
            out["b"] = group.submit(_batch("b"), lead)

    other = threading.Thread(target=arriving_later)
    other.start()
    assert building.wait(10)
    leader = _submit_in_thread(group, _batch("a"), lead, out)
    _wait_queued(group, 1)
    time.sleep(0.05)
    assert lead.groups == []  # the leader waits for the batch being built
    built.set()
    leader.join(10)
    other.join(10)
    assert lead.groups == [["a", "b"]]


def test_a_leader_does_not_wait_past_the_linger() -> None:
    group, lead = GroupCommit(linger_s=0.05), Recorder()
    lead.release.set()
    done = threading.Event()

    def never_submits() -> None:
        with group.arriving():
            assert done.wait(10)

    other = threading.Thread(target=never_submits)
    other.start()
    try:
        started = time.monotonic()
        assert group.submit(_batch("a"), lead) == 1
        assert 0.04 < time.monotonic() - started < 5
    finally:
        done.set()
        other.join(10)
    assert group._arriving == 0


def test_nested_arrivals_count_once_and_end_at_submit() -> None:
    group, lead = GroupCommit(linger_s=5), Recorder()
    lead.release.set()
    with group.arriving(), group.arriving():
        assert group._arriving == 1
        started = time.monotonic()
        assert group.submit(_batch("a"), lead) == 1
        assert time.monotonic() - started < 1  # it does not wait for itself
        assert group._arriving == 0
    assert group._arriving == 0
