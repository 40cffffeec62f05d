"""The seasonal world replayed the way a user's log shipper and cron feed
cachewatch, then scored: `bench/detection.py --world` runs it per seed, and a short
version runs in the test suite.

In a fresh SQLite database, the world's records go in chunks of `chunk_hours` of
data time, in time order, in batches through the ingestion service (one
transaction each, as `POST /v1/usage` commits them): a few records of each
chunk's last hours are held back and sent with the next chunk (a lagging
shipper), and one batch per chunk is sent twice (a retry: its records come back
as duplicates). The chunk's posted events follow. Then one detection pass: the
analytics catch-up in its own transaction first, then `detect` (timed on its
own). At the end every stored regression is scored, with the data time of the
chunk whose pass first created it.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import func, select

from service.detection.changepoints import DropRule
from service.settings import Settings
from service.simulate.builders import ExpectedChange
from service.simulate.engine import Record, iter_records, token_counts
from service.simulate.events import scenario_events
from service.simulate.scoring import Found, Score, score
from service.simulate.world import World, seasonal_world

HOUR_S = 3600.0
#: The detection bucket (cachewatch's default): a change_ts is a bucket's start.
BUCKET_S = float(Settings.model_fields["detect_bucket_s"].default)
DAY_S = 86_400.0


@dataclass(frozen=True)
class ReplayConfig:
    """How the world is shipped: chunks of data time, batches, late records."""

    days: float = 14.0
    scale: float = 1.0
    chunk_hours: float = 48.0
    batch: int = 5_000
    late_share: float = 0.005
    late_from_last_s: float = 6 * HOUR_S


@dataclass
class Timings:
    """Seconds spent simulating, ingesting (records and events), bringing the
    analytics up to date and detecting, summed over the passes: detection is timed
    apart from the catch-up it would otherwise start with."""

    simulate_s: float = 0.0
    ingest_s: float = 0.0
    analytics_s: float = 0.0
    detect_s: float = 0.0


@dataclass
class SeedResult:
    """One seed's replay: its score, sizes and timings, and for each matched
    regression how long after the change it was first reported."""

    seed: int
    records: int
    stored: int
    duplicates_sent: int
    passes: int
    timings: Timings
    score: Score
    lags: list[str] = field(default_factory=list)


class _Chunks:
    """The world's records cut into chunks of data time (seconds since its start),
    each record with its offset; `simulate_s` sums the time spent simulating them
    and `hourly` the (requests, prompt, cached tokens) of each service's hours."""

    def __init__(self, world: World, chunk_s: float) -> None:
        self._timed = self._offsets(world)
        self.chunk_s = chunk_s
        self._pending: tuple[float, Record] | None = None
        self.simulate_s = 0.0
        self.hourly: dict[tuple[str, int], list[int]] = defaultdict(lambda: [0, 0, 0])
        # each grouped truth's group's first request at or after its change
        self._awaited = {
            (e.service, e.group[0], e.group[1]): e.at_s for e in world.expected if e.group
        }
        self.first_after: dict[tuple[str, str, str], float] = {}

    def _offsets(self, world: World) -> Iterator[tuple[float, Record]]:
        origin = world.scenario.start.timestamp()
        for record in iter_records(world.scenario):
            t = _epoch_s(record["ts"]) - origin
            prompt, cached = token_counts(record)
            sums = self.hourly[(record["service"], int(t // HOUR_S))]
            sums[0] += 1
            sums[1] += prompt
            sums[2] += cached
            if self._awaited:
                self._note_group(record, t)
            yield t, record

    def _note_group(self, record: Record, t: float) -> None:
        for by in ("tenant", "scenario"):
            key = (record["service"], by, record.get(by) or "")
            at = self._awaited.get(key)
            if at is not None and t >= at:
                self.first_after[key] = t
                del self._awaited[key]

    def __iter__(self) -> Iterator[tuple[float, list[tuple[float, Record]]]]:
        end = self.chunk_s
        while True:
            started = time.perf_counter()
            chunk = self._take(end)
            self.simulate_s += time.perf_counter() - started
            if not chunk and self._pending is None:
                return
            yield end, chunk
            end += self.chunk_s

    def _take(self, end: float) -> list[tuple[float, Record]]:
        chunk: list[tuple[float, Record]] = []
        if self._pending is not None:
            if self._pending[0] >= end:
                return chunk
            chunk.append(self._pending)
            self._pending = None
        for item in self._timed:
            if item[0] >= end:
                self._pending = item
                break
            chunk.append(item)
        return chunk


def _epoch_s(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def _hold_back(
    chunk: list[tuple[float, Record]], end_s: float, cfg: ReplayConfig, rnd: random.Random
) -> tuple[list[Record], list[Record]]:
    """(sent now, held back): a `late_share` of the chunk, drawn among its records of
    the last `late_from_last_s`, waits for the next chunk (a lagging shipper)."""
    recent = [i for i, (t, _) in enumerate(chunk) if t >= end_s - cfg.late_from_last_s]
    held = set(rnd.sample(recent, min(len(recent), round(cfg.late_share * len(chunk)))))
    sent = [r for i, (_, r) in enumerate(chunk) if i not in held]
    return sent, [chunk[i][1] for i in sorted(held)]


def _batches(records: list[Record], size: int, rnd: random.Random) -> list[list[Record]]:
    """The records in batches of `size`, one of them sent twice in a row (a retry
    after a lost answer)."""
    batches = [records[i : i + size] for i in range(0, len(records), size)]
    if batches:
        retried = rnd.randrange(len(batches))
        batches.insert(retried + 1, batches[retried])
    return batches


class _Cachewatch:
    """A fresh cachewatch on a SQLite file: ingest, events, detection passes."""

    def __init__(self, folder: str) -> None:
        from service import migrate
        from service.db import make_engine, make_sessionmaker
        from service.settings import Settings

        self.settings = Settings(database_url=f"sqlite:///{folder}/world.db", run_jobs=False)
        self.engine = make_engine(self.settings)
        migrate.upgrade(self.engine)
        self.factory = make_sessionmaker(self.engine)
        self.first_seen: dict[int, float] = {}

    def ingest(self, batch: list[Record]) -> int:
        """One batch as one POST /v1/usage; returns the duplicates it met."""
        from service.services.ingestion import ingest_usage

        body = b"\n".join(orjson.dumps(r) for r in batch)
        with self.factory.begin() as session:
            outcome = ingest_usage(
                session,
                body,
                content_encoding=None,
                max_decompressed_bytes=1 << 34,
                received_us=time.time_ns() // 1000,
            )
        if outcome.rejected:
            raise ValueError(f"simulated records rejected: {outcome.errors[:3]}")
        return outcome.duplicates

    def post(self, events: list[dict[str, Any]]) -> None:
        from service.services.events import EventIn, record_event

        with self.factory.begin() as session:
            for event in events:
                record_event(session, EventIn.model_validate(event))

    def detection_pass(self, data_time_s: float, timings: Timings) -> None:
        """The analytics catch-up, then one detection pass (timed apart); the
        regressions it creates are first seen at `data_time_s` (epoch seconds)."""
        from service.models import Regression
        from service.services.analytics_pass import catch_up
        from service.services.detection import detect

        started = time.perf_counter()
        with self.factory.begin() as session:
            catch_up(session, self.settings)
        timings.analytics_s += time.perf_counter() - started
        started = time.perf_counter()
        with self.factory.begin() as session:
            detect(session, self.settings)
        timings.detect_s += time.perf_counter() - started
        with self.factory.begin() as session:
            for rid in session.scalars(select(Regression.id)):
                self.first_seen.setdefault(rid, data_time_s)

    def stored(self) -> int:
        """The usage records stored (each once, whatever was resent)."""
        from service.models import UsageRecord

        with self.factory.begin() as session:
            return int(session.scalar(select(func.count()).select_from(UsageRecord)) or 0)

    def regressions(self) -> list[Found]:
        from service.models import Regression
        from service.services.regressions import regression_to_json

        with self.factory.begin() as session:
            rows = session.scalars(select(Regression).order_by(Regression.id))
            return [regression_to_json(r) for r in rows]

    def close(self) -> None:
        self.engine.dispose()


def left_band_s(
    hourly: dict[tuple[str, int], list[int]],
    service: str,
    from_s: float,
    rule: DropRule | None = None,
) -> float | None:
    """When the service's hit rate left its seasonal band after `from_s`: the end of
    the first of two hours in a row each below the same hour a week earlier by the
    regression rule's amounts (`min_abs` and `min_rel` of that hour's rate; hours of
    at least 20 requests); None: it never did. Less than that is within what the
    rule calls normal, however clearly it shows (contract section 5c)."""
    rule = rule or DropRule()

    def rate(hour: int) -> float | None:
        sums = hourly.get((service, hour))
        return None if sums is None or sums[0] < 20 else sums[2] / max(sums[1], 1)

    def low(hour: int) -> bool:
        now, before = rate(hour), rate(hour - 168)
        if now is None or before is None:
            return False
        return before - now >= max(rule.min_abs, rule.min_rel * before)

    last = max((h for s, h in hourly if s == service), default=-1)
    for hour in range(int(from_s // HOUR_S), last):
        if low(hour) and low(hour + 1):
            return (hour + 1) * HOUR_S
    return None


#: How long after it left its band an erosion's report may be dated (its drop's
#: start is that day's first busy hour below normal, hours before the rule's
#: amounts are reached).
ERODED_SLACK_S = 6 * HOUR_S


def _deadlines(
    world: World,
    hourly: dict[tuple[str, int], list[int]],
    chunk_s: float,
    first_after: dict[tuple[str, str, str], float] | None = None,
) -> list[ExpectedChange]:
    """The expected regressions, the erosion (no event) with its deadline: reported
    by the first pass at least a day after its hit rate left the seasonal band, and
    dated from its start until a little after it left the band; a group's dated up
    to the bucket of its first request after the change (a sparse tenant's next
    request may come an hour later: the first that can show it, contract 5c)."""
    expected = []
    for want in world.expected:
        if want.group is not None and first_after is not None:
            first = first_after.get((want.service, *want.group))
            if first is not None:
                reach = first - want.at_s + BUCKET_S
                want = replace(want, window_after_s=max(want.window_after_s, reach))
        if want.kind is None and want.report_by_s is None:
            left = left_band_s(hourly, want.service, want.at_s)
            if left is not None:
                due = left + DAY_S
                want = replace(
                    want,
                    report_by_s=-(-due // chunk_s) * chunk_s,
                    window_after_s=max(want.window_after_s, left + ERODED_SLACK_S - want.at_s),
                )
        expected.append(want)
    return expected


def _note(world: World) -> Callable[[Found], str]:
    """What an extra report was about: a benign happening of its service near its
    change_ts, else the time of day or week it fell in."""
    origin = world.scenario.start.timestamp()

    def note(found: Found) -> str:
        t = _epoch_s(found["change_ts"]) - origin
        near = [
            b
            for b in world.benign
            if b.service == found["service"] and b.at_s - HOUR_S <= t <= b.until_s + HOUR_S
        ]
        if near:
            b = min(near, key=lambda b: abs(b.at_s - t))
            return f"{b.label}: {b.description}"
        day, hour = int(t // DAY_S), (t % DAY_S) / HOUR_S
        when = "weekend" if day % 7 >= 5 else "weekday"
        return f"{when} {hour:04.1f}h"

    return note


def _ship_and_detect(
    world: World, cfg: ReplayConfig, cw: _Cachewatch, chunks: _Chunks, rnd: random.Random
) -> tuple[int, int, int, Timings]:
    """Every chunk shipped, its events posted, then a detection pass; returns the
    records, the duplicates the retries met, the passes and the timings."""
    origin = world.scenario.start.timestamp()
    events = [(_epoch_s(e["ts"]) - origin, e) for e in scenario_events(world.scenario)]
    timings = Timings()
    records = duplicates = passes = 0
    held: list[Record] = []
    for end_s, chunk in chunks:
        later: list[Record] = []
        if end_s >= world.scenario.duration_s:  # the last chunk: nothing comes later
            sent = [r for _, r in chunk]
        else:
            sent, later = _hold_back(chunk, end_s, cfg, rnd)
        started = time.perf_counter()
        duplicates += sum(cw.ingest(b) for b in _batches(held + sent, cfg.batch, rnd))
        cw.post([e for t, e in events if end_s - chunks.chunk_s <= t < end_s])
        timings.ingest_s += time.perf_counter() - started
        records, held = records + len(chunk), later
        cw.detection_pass(origin + end_s, timings)
        passes += 1
    timings.simulate_s = chunks.simulate_s
    return records, duplicates, passes, timings


def _lag_line(want: ExpectedChange, found: Found, first_seen_s: float, origin: float) -> str:
    """How long after the change the pass that first reported it ran (in data time:
    the end of the chunk it followed)."""
    lag_h = (first_seen_s - origin - want.at_s) / HOUR_S
    return (
        f"{want.service} [{want.cause}] changed {want.ts[:16]}: first reported {lag_h:.1f} h "
        f"later, by the pass after day {(first_seen_s - origin) / DAY_S:g} "
        f"(regression {found['id']})"
    )


def replay_world(seed: int, cfg: ReplayConfig | None = None) -> SeedResult:
    """Simulate, ship, detect and score one seed of the seasonal world."""
    cfg = cfg or ReplayConfig()
    world = seasonal_world(seed, days=cfg.days, scale=cfg.scale)
    origin = world.scenario.start.timestamp()
    chunks = _Chunks(world, cfg.chunk_hours * HOUR_S)
    with tempfile.TemporaryDirectory() as folder:
        cw = _Cachewatch(folder)
        try:
            records, duplicates, passes, timings = _ship_and_detect(
                world, cfg, cw, chunks, random.Random(seed * 31 + 7)
            )
            found, stored = cw.regressions(), cw.stored()
        finally:
            cw.close()
    expected = _deadlines(world, chunks.hourly, chunks.chunk_s, chunks.first_after)
    outcome = score(found, expected, cw.first_seen, note=_note(world))
    lags = [_lag_line(w, f, cw.first_seen[f["id"]], origin) for w, f in outcome.matches]
    return SeedResult(seed, records, stored, duplicates, passes, timings, outcome, lags)
