"""Detection under many deploy tags of one service (issue 32; not a test, prints numbers).

The same records at every row: two days of two services on one model, a request every
10 s each. Service `tagged` ships a new deploy tag every 2 days / N (N = 20, 200 and
2,000 tags): each tag serves 10% of the requests as a canary beside the current tag
for one period, then the rest for the next. Service `steady` keeps one tag. One tag of
`tagged` in the middle of the window is broken (its requests miss the cache).

Each row prints the first detection pass over both services (after the analytics
pass, not timed; it infers every tag's deploy event), the next pass (nothing new),
each with its ratio to the 20-tag row, how long `steady` waits for `tagged` in the
first pass (the pass minus `steady`'s own: a service examined after `tagged` waits
that long), and the canaries found. Detection watches at most
`detect_max_group_values` (200) tags per (service, model); the last row watches all
2,000, to show the comparison itself linear.

    .venv/bin/python bench/card_tags.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TAGS = (20, 200, 2_000)
T0 = 1_764_374_400  # 2025-11-29T00:00:00Z
SPAN_S = 2 * 86_400
STEP_S = 10
US = 1_000_000


def _record(service: str, i: int, ts: float, tag: str, broken: bool) -> dict[str, Any]:
    start = [1_000_000 + b for b in range(8)]
    if broken:
        start[0] = 9_000_000 + i  # a timestamp at the top: every request differs
    return {
        "request_id": f"{service}-{i}",
        "ts": ts,
        "service": service,
        "model": "m",
        "deploy": tag,
        "prompt_tokens": 1000,
        "cached_tokens": 0 if broken else 800,
        "block_size": 100,
        "block_hashes": [*start, 50_000_000 + 2 * i, 50_000_001 + 2 * i],
    }


def records(tags: int) -> list[dict[str, Any]]:
    """Both services' records: `tagged` with `tags` tags, `steady` with one."""
    period = SPAN_S / tags
    broken = tags // 2
    out = []
    for i in range(SPAN_S // STEP_S):
        ts = T0 + i * STEP_S
        current = int(ts - T0) // int(period) if period >= 1 else int((ts - T0) / period)
        tag = current + 1 if i % 10 == 0 and current + 1 < tags else current
        out.append(_record("tagged", i, ts, f"build-{tag:05d}", tag == broken))
        out.append(_record("steady", i, ts + STEP_S / 2, "v1", False))
    return out


def _measure(tags: int, watched: int | None = None) -> tuple[float, float, float, int]:
    """(the first pass over both services, the next one, the first pass over `steady`
    alone, canaries found), watching at most `watched` values of a group field."""
    from service import migrate
    from service.db import make_engine, make_sessionmaker
    from service.services import analytics_pass
    from service.services.detection import detect
    from service.settings import Settings
    from tests.simulated import load_records

    with tempfile.TemporaryDirectory() as folder:
        settings = Settings(database_url=f"sqlite:///{folder}/bench.db", run_jobs=False)
        if watched is not None:
            settings = settings.model_copy(update={"detect_max_group_values": watched})
        engine = make_engine(settings)
        migrate.upgrade(engine)
        factory = make_sessionmaker(engine)
        with factory.begin() as session:
            load_records(session, records(tags), [])
        with factory.begin() as session:
            analytics_pass.catch_up(session, settings)
        with factory.begin() as session:
            started = time.perf_counter()
            detect(session, settings, "steady")
            alone = time.perf_counter() - started
            session.rollback()
        with factory.begin() as session:  # the first pass infers every tag's deploy event
            started = time.perf_counter()
            report = detect(session, settings)
            first = time.perf_counter() - started
        with factory.begin() as session:
            started = time.perf_counter()
            detect(session, settings)
            after = time.perf_counter() - started
        engine.dispose()
    found = sum(1 for r in report.created if r.canary)
    return first, after, alone, found


def run() -> list[str]:
    """The table's lines: one row per tag count (and 2,000 tags all watched)."""
    lines = [
        "detection under many deploy tags of one service (2 days, 2 services, 34,560 "
        "records; SQLite)",
        f"{'tags':>18} {'first pass s':>13} {'x 20':>6} {'next pass s':>12} {'x 20':>6} "
        f"{'steady waits s':>15} {'canaries':>9}",
    ]
    rows = [(f"{n:,}", n, None) for n in TAGS] + [("2,000 all watched", 2_000, 2_000)]
    base: tuple[float, float] | None = None
    for label, tags, watched in rows:
        first, after, alone, found = _measure(tags, watched)
        base = base or (first, after)
        lines.append(
            f"{label:>18} {first:>13.2f} {first / base[0]:>6.1f} {after:>12.2f} "
            f"{after / base[1]:>6.1f} {max(first - alone, 0):>15.2f} {found:>9}"
        )
    return lines


if __name__ == "__main__":
    for line in run():
        print(line, flush=True)
