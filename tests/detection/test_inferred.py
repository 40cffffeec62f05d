"""Unit tests of service.detection.inferred.replica_changes on hand-built minute
frames (bucket_us, replica, requests), and of the inferred replicas events that
`infer_events` stores on a database after every 48-hour chunk.

They prove contract section 3 for replicas events: the count is the number of
distinct replicas within the trailing hour, a change is reported once it holds for
3 detection buckets, with the bucket it happened in, the new and previous counts
and the replicas that came or went; a scale-up 1 -> 4 is one change, a scale-down
is dated when the last request of the removed replicas leaves the trailing hour,
and neither a short-lived count change nor a quiet night with fewer replicas
active is a change. And the user report behind docs/detection.md section 1: on
production-shaped traffic (quiet nights, prefix-affinity routing that keeps a
quiet night or an early user's session on one replica, detection windows that
start at night) no change is inferred without evidence that survives a quiet
night, while real scale-outs and scale-downs are still inferred, at their
requests, the same on every pass.
"""

from __future__ import annotations

from collections.abc import Iterable

import polars as pl
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from service import repository
from service.detection.inferred import ReplicaChange, replica_changes
from service.models import ChangeEvent
from service.services import analytics_pass
from service.services.detection import infer_events
from service.settings import Settings
from tests.simulated import load_records

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
    # once the traffic since their last request reached 100 requests per replica
    # (400) with the trailing hour holding 20 per replica (80).
    rows = busy(range(0, 240), FOUR) + quiet(range(240, 840), ("r0",), 10)
    rows += busy(range(840, 1080), ["r0"], 2)
    (change,) = replica_changes(frame(rows), BUCKET_S)
    assert (change.replicas, change.previous, change.removed) == (1, 4, ("r1", "r2", "r3"))
    # The night carried 60 requests, the day 2 a minute: 400 by the end of the bucket
    # 170 minutes into the day; 2 per replica in the night's hours was never enough.
    assert change.bucket_us == (840 + 165) * MINUTE_US


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


# Production-shaped traffic (the user report: daily seasons with quiet nights,
# replicas behind prefix-affinity routing, detection after every 48-hour chunk).

HOUR = 60
DAY = 24 * HOUR
TWO = ("r0", "r1")
THREE = ("r0", "r1", "r2")


def fleet_day(day: int, names: tuple[str, ...], sticky_morning: bool = True) -> list[Row]:
    """One day of a steady fleet (minutes counted from day 0's midnight). 08:00-20:00
    busy: every replica 3 requests a minute. The night quiet: 3 requests an hour (at
    :10, :30, :50), round robin until 02:00, then all on the first replica (prefix
    affinity sends the few sessions left to one replica). With `sticky_morning`, an
    early user's session, sticky to the first replica too, adds a request a minute
    from 06:30 until the day starts: the hour before 08:00 holds 63 requests and no
    other replica serves, the kind of quiet morning simulated affinity fleets show."""
    base = day * DAY
    rows: list[Row] = []
    for hour in range(24):
        start = base + hour * HOUR
        if 8 <= hour < 20:
            rows += busy(range(start, start + HOUR), names, 3)
            continue
        for i, minute in enumerate((10, 30, 50)):
            replica = names[0] if 2 <= hour < 8 else names[(hour * 3 + i) % len(names)]
            rows.append(((start + minute) * MINUTE_US, replica, 1))
        if sticky_morning and hour in (6, 7):
            rows += busy(range(start + (30 if hour == 6 else 0), start + HOUR), names[:1], 1)
    return rows


def fleet(days: int, names: tuple[str, ...], sticky_morning: bool = True) -> list[Row]:
    return [row for day in range(days) for row in fleet_day(day, names, sticky_morning)]


def since(rows: list[Row], start_minute: int) -> list[Row]:
    return [row for row in rows if row[0] >= start_minute * MINUTE_US]


@pytest.mark.parametrize("names", [TWO, THREE], ids=["2 replicas", "3 replicas"])
def test_a_steady_fleet_with_quiet_nights_and_sticky_mornings_has_no_change(
    names: tuple[str, ...],
) -> None:
    # Before the fix, every sticky morning was a scale-down and its end a scale-up:
    # the hour before 08:00 held 63 requests, all on r0, above 20 per replica.
    assert replica_changes(frame(fleet(5, names)), BUCKET_S) == []


@pytest.mark.parametrize("start_hour", [0, 2, 3, 23], ids=lambda h: f"window from {h:02d}:00")
@pytest.mark.parametrize("names", [TWO, THREE], ids=["2 replicas", "3 replicas"])
def test_a_window_starting_in_a_quiet_night_has_no_change(
    names: tuple[str, ...], start_hour: int
) -> None:
    """The user report: the detection window (newest data minus 14 days) starts at
    night; its first hour sees only r0, and before the fix the morning then looked
    like "1 -> 2" for a replica that had served since the evening before."""
    rows = since(fleet(6, names, sticky_morning=False), DAY + start_hour * HOUR)
    assert replica_changes(frame(rows), BUCKET_S) == []


def without(rows: list[Row], replica: str, start: int, stop: int) -> list[Row]:
    """The rows, less `replica`'s requests in minutes [start, stop)."""
    return [
        row
        for row in rows
        if row[1] != replica or not start * MINUTE_US <= row[0] < stop * MINUTE_US
    ]


def test_a_scale_out_and_a_scale_down_by_day_are_seen_in_the_fleet() -> None:
    # r3 joins on day 3 at 10:00; r2 leaves on day 4 at 15:00 (last request 14:59).
    rows = without(fleet(6, FOUR), "r3", 0, 3 * DAY + 10 * HOUR)
    rows = without(rows, "r2", 4 * DAY + 15 * HOUR, 6 * DAY)
    assert replica_changes(frame(rows), BUCKET_S) == [
        ReplicaChange((3 * DAY + 10 * HOUR) * MINUTE_US, 4, 3, ("r3",), ()),
        # out of the trailing hour at the end of 15:55-16:00, with 540 requests since
        ReplicaChange((4 * DAY + 15 * HOUR + 55) * MINUTE_US, 3, 4, (), ("r2",)),
    ]


def test_a_scale_down_at_nightfall_is_seen_the_next_morning() -> None:
    # r2 leaves on day 2 at 20:00: the night (30 requests, then the sticky morning's
    # 90, all on the other two) proves nothing; by day (6 requests a minute) the
    # traffic since its last request reaches 300 (100 per replica of 3) at the end
    # of 08:25-08:30, with a busy trailing hour.
    rows = without(fleet(5, THREE), "r2", 2 * DAY + 20 * HOUR, 5 * DAY)
    (change,) = replica_changes(frame(rows), BUCKET_S)
    assert (change.previous, change.replicas, change.removed) == (3, 2, ("r2",))
    assert change.bucket_us == (3 * DAY + 8 * HOUR + 25) * MINUTE_US


def test_a_replica_back_after_a_proven_absence_is_a_scale_up() -> None:
    rows = without(fleet(5, THREE), "r2", 2 * DAY + 15 * HOUR, 3 * DAY + 10 * HOUR)
    assert replica_changes(frame(rows), BUCKET_S) == [
        ReplicaChange((2 * DAY + 15 * HOUR + 55) * MINUTE_US, 2, 3, (), ("r2",)),
        ReplicaChange((3 * DAY + 10 * HOUR) * MINUTE_US, 3, 2, ("r2",), ()),
    ]


def test_where_the_window_starts_does_not_change_what_is_inferred() -> None:
    """Idempotency: detection reads a warm-up day before its window and reports only
    inside the window. Whatever hour the window starts at (a cron's 48-hour chunks
    move it), the changes inside it are those of a read of all the data."""
    rows = without(fleet(7, FOUR), "r3", 0, 3 * DAY + 10 * HOUR)
    rows = without(rows, "r2", 4 * DAY + 20 * HOUR, 7 * DAY)
    everything = replica_changes(frame(rows), BUCKET_S)
    assert [(c.previous, c.replicas) for c in everything] == [(3, 4), (4, 3)]
    for start in range(DAY + 30, 5 * DAY, 2 * HOUR + 25):
        read = since(rows, start - DAY)
        expected = [c for c in everything if c.bucket_us >= start * MINUTE_US]
        assert replica_changes(frame(read), BUCKET_S, report_from_us=start * MINUTE_US) == (
            expected
        ), f"window from minute {start}"


def test_a_replica_first_seen_after_little_traffic_served_unseen() -> None:
    # The data start quiet: r1's first request comes after 60 requests, all on r0
    # (30 per replica of 2): nothing says it was absent, so it counted from the start.
    rows = quiet(range(0, 60), ("r0",), 1) + busy(range(60, 240), TWO, 3)
    assert replica_changes(frame(rows), BUCKET_S) == []
    # After 120 requests (60 per replica) and a trailing hour of 120, it is new.
    rows = quiet(range(0, 120), ("r0",), 1) + busy(range(120, 240), TWO, 3)
    assert replica_changes(frame(rows), BUCKET_S) == [
        ReplicaChange(120 * MINUTE_US, 2, 1, ("r1",), ())
    ]


# On a database: `infer_events` after every 48-hour chunk, as a cron would run
# `cachewatch detect`, its window starting at night.

T0_S = 1_740_960_000  # Monday 2025-03-03 00:00 UTC: minute m of the fleet is T0 + 60 m


def records_of(rows: Iterable[Row], service: str = "assistant") -> list[dict[str, object]]:
    """One usage record per request, the minute's requests a second apart."""
    return [
        {
            "request_id": f"{service}-{replica}-{minute_us}-{i}",
            "ts": T0_S + minute_us // 1_000_000 + i,
            "service": service,
            "model": "m",
            "prompt_tokens": 1000,
            "cached_tokens": 800,
            "replica": replica,
        }
        for minute_us, replica, count in rows
        for i in range(count)
    ]


def run_passes(
    session: Session, settings: Settings, rows: list[Row], first_minute: int, chunks: int
) -> list[int]:
    """Ship the rows in 48-hour chunks from `first_minute`; after each, one pass of
    `infer_events` on the window detection uses (newest data minus the lookback).
    The window starts of the passes, in minutes of the fleet."""
    starts = []
    for chunk in range(chunks):
        lo, hi = first_minute + chunk * 2 * DAY, first_minute + (chunk + 1) * 2 * DAY
        load_records(session, records_of(r for r in rows if lo <= r[0] // MINUTE_US < hi), [])
        session.commit()
        analytics_pass.catch_up(session, settings)
        newest = repository.newest_rollup_bucket(session)
        assert newest is not None
        since_us = newest - settings.detect_lookback_days * 86_400 * 1_000_000
        infer_events(session, settings, since_us, None)
        session.commit()
        starts.append((since_us // 1_000_000 - T0_S) // 60)
    return starts


def replica_events(session: Session) -> list[tuple[int, int | None, str | None]]:
    query = (
        select(ChangeEvent.ts_us, ChangeEvent.replicas, ChangeEvent.description)
        .where(ChangeEvent.kind == "replicas", ChangeEvent.source == "inferred")
        .order_by(ChangeEvent.ts_us)
    )
    return [(ts, n, d) for ts, n, d in session.execute(query).all()]


@pytest.fixture
def two_day_lookback(settings: Settings) -> Settings:
    """The lookback of 14 days needs more than 14 days of records to move; 2 days
    show the same on a few days of records."""
    return settings.model_copy(update={"detect_lookback_days": 2})


def test_passes_over_a_steady_fleet_with_quiet_nights_infer_no_replicas_event(
    session: Session, two_day_lookback: Settings
) -> None:
    """The user report: chunks shipped at 03:00, so every pass's window starts at
    night, when the few requests all go to r0. Before the fix the passes inferred
    "1 -> 2" at r1's first request of the mornings after their window starts; r1
    had served the evening before."""
    rows = fleet(8, TWO, sticky_morning=False)
    starts = run_passes(session, two_day_lookback, rows, 3 * HOUR, 3)
    # The newest request is the night's 02:50 one: the windows start at 02:50.
    assert [s % DAY for s in starts] == [2 * HOUR + 50] * 3
    assert replica_events(session) == []


def test_passes_infer_a_real_scale_out_and_scale_down_once_at_their_requests(
    session: Session, two_day_lookback: Settings
) -> None:
    # r2 joins on day 3 at 10:00 (first request 10:00:00); r1 leaves on day 4 at
    # 20:00 (last request 19:59:02) and the window of the last pass starts after both.
    rows = without(fleet(8, THREE, sticky_morning=False), "r2", 0, 3 * DAY + 10 * HOUR)
    rows = without(rows, "r1", 4 * DAY + 20 * HOUR, 8 * DAY)
    run_passes(session, two_day_lookback, rows, 3 * HOUR, 3)
    scale_out = (T0_S + (3 * DAY + 10 * HOUR) * 60) * 1_000_000
    scale_down = (T0_S + (4 * DAY + 20 * HOUR - 1) * 60 + 2) * 1_000_000
    assert replica_events(session) == [
        (scale_out, 3, "replicas serving 2 -> 3 (new: r2)"),
        (scale_down, 2, "replicas serving 3 -> 2 (gone: r1)"),
    ]
    # Another pass on the same data infers nothing new.
    since_us = (T0_S + 4 * DAY * 60) * 1_000_000
    assert infer_events(session, two_day_lookback, since_us, None) == 0
