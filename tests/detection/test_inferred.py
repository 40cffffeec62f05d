"""Unit tests of service.detection.inferred.replica_changes on hand-built minute
frames (bucket_us, replica, requests).

They prove contract section 3 for replicas events: the count is the number of
distinct replicas within the trailing hour, a change is reported once it holds for
3 detection buckets, with the bucket it happened in, the new and previous counts
and the replicas that came or went; a scale-up 1 -> 4 is one change, a scale-down
is dated when the last request of the removed replicas leaves the trailing hour,
and neither a short-lived count change nor a quiet night with fewer replicas
active is a change.
"""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl
import pytest

from service.detection.inferred import ReplicaChange, replica_changes

MINUTE_US = 60_000_000
BUCKET_S = 300
BUCKET_US = BUCKET_S * 1_000_000
FOUR = ("r0", "r1", "r2", "r3")

Row = tuple[int, str, int]


def frame(rows: Iterable[Row]) -> pl.DataFrame:
    schema = {"bucket_us": pl.Int64, "replica": pl.Utf8, "requests": pl.Int64}
    return pl.DataFrame(list(rows), schema=schema, orient="row")


def busy(minutes: range, replicas: Iterable[str], per_minute: int = 8) -> list[Row]:
    """Every replica serves `per_minute` requests in every minute."""
    names = list(replicas)
    return [(m * MINUTE_US, name, per_minute) for m in minutes for name in names]


def quiet(minutes: range, replicas: tuple[str, ...], every: int) -> list[Row]:
    """One request every `every` minutes, round robin over the replicas."""
    return [
        (m * MINUTE_US, replicas[i % len(replicas)], 1)
        for i, m in enumerate(range(minutes.start, minutes.stop, every))
    ]


def test_a_lasting_scale_up_from_one_to_four_is_one_change() -> None:
    rows = busy(range(0, 180), ["r0"], 30) + busy(range(180, 360), FOUR)
    assert replica_changes(frame(rows), BUCKET_S) == [
        ReplicaChange(
            bucket_us=180 * MINUTE_US,  # the bucket of the new replicas' first requests
            replicas=4,
            previous=1,
            added=("r1", "r2", "r3"),
            removed=(),
        )
    ]


def test_replicas_joining_a_few_minutes_apart_are_still_one_change() -> None:
    rows = busy(range(0, 360), ["r0"], 30)
    rows += busy(range(182, 360), ["r1"]) + busy(range(186, 360), ["r2"])
    rows += busy(range(190, 360), ["r3"])  # counts 2, 3 last one bucket each
    assert replica_changes(frame(rows), BUCKET_S) == [
        ReplicaChange(190 * MINUTE_US, 4, 1, ("r1", "r2", "r3"), ())
    ]


def test_a_scale_down_is_seen_when_the_gone_replicas_leave_the_trailing_hour() -> None:
    rows = busy(range(0, 180), FOUR) + busy(range(180, 360), ["r0"], 30)
    # r1-r3 served last in minute 179; the hour ending 4:00 no longer holds them:
    # the count becomes 1 at the end of the bucket 3:55-4:00.
    assert replica_changes(frame(rows), BUCKET_S) == [
        ReplicaChange(235 * MINUTE_US, 1, 4, (), ("r1", "r2", "r3"))
    ]


def test_a_scale_up_then_down_gives_two_changes() -> None:
    rows = busy(range(0, 120), ["r0"], 30) + busy(range(120, 240), FOUR)
    rows += busy(range(240, 420), ["r0", "r1"], 15)
    assert replica_changes(frame(rows), BUCKET_S) == [
        ReplicaChange(120 * MINUTE_US, 4, 1, ("r1", "r2", "r3"), ()),
        ReplicaChange(295 * MINUTE_US, 2, 4, (), ("r2", "r3")),
    ]


def test_a_count_change_lasting_two_buckets_is_not_a_change() -> None:
    # r3 pauses 65 minutes (119 -> 185): for two buckets (2:55-3:05) no request of it
    # lies in the trailing hour, then it serves again.
    rows = busy(range(0, 360), FOUR[:3]) + busy(range(0, 120), ["r3"])
    rows += busy(range(185, 360), ["r3"])
    assert replica_changes(frame(rows), BUCKET_S) == []


def test_a_replica_blipping_for_one_bucket_is_not_a_change_on_a_bucket_window() -> None:
    rows = [*busy(range(0, 360), ["r0"], 30), (182 * MINUTE_US, "r9", 3)]
    assert replica_changes(frame(rows), BUCKET_S, window_s=BUCKET_S) == []


def test_a_replica_seen_once_counts_for_the_trailing_hour() -> None:
    # Contract section 3 counts distinct replicas "within the trailing hour": one
    # bucket of r9 keeps the count at 2 for 12 buckets, which is a lasting change.
    rows = [*busy(range(0, 360), ["r0"], 30), (182 * MINUTE_US, "r9", 3)]
    assert replica_changes(frame(rows), BUCKET_S) == [
        ReplicaChange(180 * MINUTE_US, 2, 1, ("r9",), ()),
        ReplicaChange(240 * MINUTE_US, 1, 2, (), ("r9",)),
    ]


def test_a_change_in_the_last_two_buckets_is_not_reported_yet() -> None:
    rows = busy(range(0, 180), ["r0"], 30) + busy(range(170, 180), ["r1"])
    assert replica_changes(frame(rows), BUCKET_S) == []
    assert replica_changes(frame(rows), BUCKET_S, persist=2) == [
        ReplicaChange(170 * MINUTE_US, 2, 1, ("r1",), ())
    ]


@pytest.mark.parametrize("every", [20, 40], ids=["a request every 20 min", "every 40 min"])
def test_a_quiet_night_with_fewer_replicas_active_is_not_a_change(every: int) -> None:
    # Four busy replicas by day; at night the trailing hour sees only 1-3 of them.
    rows = busy(range(0, 240), FOUR)
    rows += quiet(range(240, 240 + 600), FOUR, every)
    rows += busy(range(840, 1080), FOUR)
    assert replica_changes(frame(rows), BUCKET_S) == []


def test_a_scale_down_during_a_quiet_night_waits_for_enough_traffic() -> None:
    # 4 -> 1 at the start of the night: the silence of r1-r3 means something only
    # once the trailing hour holds 20 requests per replica (80) again.
    rows = busy(range(0, 240), FOUR) + quiet(range(240, 840), ("r0",), 10)
    rows += busy(range(840, 1080), ["r0"], 2)
    (change,) = replica_changes(frame(rows), BUCKET_S)
    assert (change.replicas, change.previous, change.removed) == (1, 4, ("r1", "r2", "r3"))
    # The hour ending 40 minutes into the day holds 80 day requests and 2 night ones;
    # the hour ending 35 minutes in held only 70 + 2.
    assert change.bucket_us == (840 + 35) * MINUTE_US


def test_records_without_a_replica_are_ignored() -> None:
    assert replica_changes(frame([(0, "", 50), (MINUTE_US, "", 50)]), BUCKET_S) == []
    rows = busy(range(0, 180), ["r0"], 30) + busy(range(90, 180), [""], 30)
    assert replica_changes(frame(rows), BUCKET_S) == []


def test_data_starting_in_a_quiet_night_is_not_a_change() -> None:
    # All four replicas serve all along: one request every 10 minutes, round robin,
    # so every full trailing hour sees the four of them.
    rows = quiet(range(0, 240), FOUR, 10) + busy(range(240, 480), FOUR)
    assert replica_changes(frame(rows), BUCKET_S) == []


def test_a_scale_out_in_the_first_hour_of_data_is_seen_once_the_fleet_was_steady() -> None:
    """The lab (docs/lab.md): one replica for 14 minutes at ~30 requests a minute,
    then four, with 60 s buckets: the single replica was a steady fleet, not replicas
    trickling in, so the change is not held back until a full trailing hour."""
    rows = busy(range(0, 14), ["r0"], 30) + busy(range(14, 30), FOUR, 4)
    (change,) = replica_changes(frame(rows), 60)
    assert (change.bucket_us, change.previous, change.replicas) == (14 * MINUTE_US, 1, 4)


def test_replicas_trickling_in_at_the_start_of_data_are_not_a_change() -> None:
    # four replicas, a request a minute round robin: 1, 2, 3, then 4 seen
    rows = quiet(range(0, 40), FOUR, 1)
    assert replica_changes(frame(rows), 60) == []
