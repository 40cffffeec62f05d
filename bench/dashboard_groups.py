"""The dashboard's groups request on grouped traffic (issue 19; not a test: prints
numbers).

N records (default 100,000) over D days (default 7) of two services of one model,
each with a scenario (10, Pareto-distributed), a tenant (T, default 300, Pareto) and
a deploy tag (v1; a tenth of the last day's on the canary v2, with no cache hits),
are ingested through the product and caught up by the analytics pass, so the group
rollups and their chart rows are what a server holds (bench/dashboard.py builds
its rollups directly, without groups). Then each of `/dashboard/data/series` and
`/dashboard/data/groups` is asked R times (default 5) per view, in-process, each
ask computed (a nonce misses the answer cache); best and median are printed.

Goal: each data request <= 300 ms (as bench/dashboard.py's).

    .venv/bin/python bench/dashboard_groups.py [--records 100000] [--days 7]
        [--tenants 300] [--repeat 5] [--database-url URL]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fastapi.testclient import TestClient  # noqa: E402

from service import migrate  # noqa: E402
from service.api.app import create_app  # noqa: E402
from service.db import make_engine, make_sessionmaker  # noqa: E402
from service.services.analytics_pass import catch_up  # noqa: E402
from service.settings import Settings  # noqa: E402
from tests.simulated import load_records  # noqa: E402

START_S = 1_767_225_600  # 2026-01-01T00:00:00Z
BATCH = 20_000
VIEWS = (
    "range=7d",
    "range=7d&service=svc-0",
    "range=24h&service=svc-0&groups=tenant",
    "range=7d&groups=tenant",
    "range=30d&groups=tenant",
    "range=7d&group_by=scenario&group_value=scn-1",
)


def traffic(n: int, days: int, tenants: int) -> list[dict[str, Any]]:
    rng = random.Random(1)
    rows = []
    for i in range(n):
        ts = START_S + days * 86_400 * i / n
        canary = ts > START_S + (days - 1) * 86_400 and rng.random() < 0.1
        prefix = rng.randrange(3)
        rows.append(
            {
                "request_id": f"r{i}",
                "ts": ts,
                "service": f"svc-{i % 2}",
                "model": "m",
                "prompt_tokens": 2048,
                "cached_tokens": 0 if canary else rng.choice([0, 1024, 1536]),
                "ttft_ms": rng.uniform(50, 900),
                "replica": f"pod-{i % 4}",
                "deploy": "v2" if canary else "v1",
                "scenario": f"scn-{int(rng.paretovariate(1.2)) % 10}",
                "tenant": f"t-{int(rng.paretovariate(0.8)) % tenants}",
                "block_size": 512,
                "block_hashes": [prefix, 10 + prefix, 1000 + i % 50, 10**6 + i],
            }
        )
    return rows


def build(settings: Settings, rows: list[dict[str, Any]]) -> float:
    engine = make_engine(settings)
    migrate.upgrade(engine)
    factory = make_sessionmaker(engine)
    started = time.perf_counter()
    for start in range(0, len(rows), BATCH):
        with factory.begin() as session:
            load_records(session, rows[start : start + BATCH], [])
        with factory.begin() as session:
            catch_up(session, settings)
    engine.dispose()
    return time.perf_counter() - started


def time_views(settings: Settings, repeat: int) -> None:
    with TestClient(create_app(settings)) as client:
        for view in VIEWS:
            for panel in ("series", "groups"):
                times = []
                for k in range(repeat):
                    started = time.perf_counter()
                    answer = client.get(f"/dashboard/data/{panel}?{view}&nonce={k}")
                    times.append(time.perf_counter() - started)
                    assert answer.status_code == 200, answer.text
                extra = ""
                if panel == "groups":
                    body = answer.json()
                    table, canary = body["table"], body["canary"]
                    extra = f"; {len(table['rows'])} rows (+{table['more']} more)"
                    extra += f", canary {canary['canary'] if canary else None}"
                best, median = min(times) * 1000, statistics.median(times) * 1000
                print(f"  {view:46} {panel:6} best {best:5.0f} ms median {median:5.0f} ms{extra}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--tenants", type=int, default=300)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--database-url", default="")
    args = parser.parse_args()
    url = args.database_url or f"sqlite:///{tempfile.mkdtemp()}/groups.db"
    settings = Settings(database_url=url, run_jobs=False, public_read=True)
    seconds = build(settings, traffic(args.records, args.days, args.tenants))
    print(f"{args.records:,} records ingested and caught up in {seconds:.0f} s ({url})")
    time_views(settings, args.repeat)


if __name__ == "__main__":
    main()
