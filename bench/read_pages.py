"""The paged reads under cardinality (issue 32; not a test: prints numbers).

Three databases, each built through the product (ingested, caught up by the
analytics pass), then read in-process (a nonce misses the dashboard's answer cache):

* `tenants`: T records in one hour, each of its own tenant (and scenario):
  `GET /v1/groups?by=tenant` (the first page, and the last) and
  `/dashboard/data/groups?groups=tenant`;
* `services`: S services of one request each: `GET /v1/findings` and
  `/dashboard/data/findings`;
* `names`: N records over 3 hours, each carrying a segment of its own name (a
  document id) besides two shared ones, one of them sent two ways side by side:
  `GET /v1/findings`.

Prints each request's time and answer size. Goal (issue 32): each well under a
second at 200k tenants, 20k services and 30k names, and linear in them.

    .venv/bin/python bench/read_pages.py [--tenants 200000] [--services 20000]
        [--names 30000]

SQLite in a temporary folder; with CACHEWATCH_TEST_DATABASE_URL (the tests'
PostgreSQL server) a new database on that server for each, dropped at the end.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from fastapi.testclient import TestClient  # noqa: E402

from bench.dashboard_groups import build  # noqa: E402
from service.api.app import create_app  # noqa: E402
from service.settings import Settings  # noqa: E402
from tests.conftest import drop_database, fresh_database_url  # noqa: E402


def now_hour_s() -> int:
    return int(time.time()) // 3600 * 3600


def base(i: int, ts: float, service: str) -> dict[str, Any]:
    return {
        "request_id": f"r{i}",
        "ts": ts,
        "service": service,
        "model": "m",
        "prompt_tokens": 2048,
        "cached_tokens": 1024 * (i % 2),
        "block_size": 512,
        "block_hashes": [1, 2, 3, 10**6 + i],
        "replica": f"pod-{i % 4}",
    }


def tenants(n: int) -> list[dict[str, Any]]:
    start = now_hour_s()
    return [
        {**base(i, start + 3500 * i / n, "svc"), "tenant": f"t-{i}", "scenario": f"s-{i}"}
        for i in range(n)
    ]


def services(n: int) -> list[dict[str, Any]]:
    start = now_hour_s() - 7200
    return [base(i, start + 3500 * i / n, f"svc-{i}") for i in range(n)]


def names(n: int) -> list[dict[str, Any]]:
    start = now_hour_s() - 4 * 3600
    rows = []
    for i in range(n):
        segments = [
            {"name": "tools", "hash": "t1", "tokens": 512},
            {"name": "system", "hash": f"s{i % 2}", "norm_hash": "s", "tokens": 512},
            {"name": f"doc-{i}", "hash": f"d{i}", "tokens": 512},
        ]
        rows.append({**base(i, start + 3 * 3600 * i / n, "svc"), "segments": segments})
    return rows


def timed(client: TestClient, path: str) -> str:
    started = time.perf_counter()
    answer = client.get(path)
    seconds = time.perf_counter() - started
    assert answer.status_code == 200, answer.text[:500]
    total = answer.headers.get("x-total-count")
    extra = f", total {total}" if total else ""
    return f"  {path:60} {seconds * 1000:8.0f} ms {len(answer.content) / 1e6:7.2f} MB{extra}"


def run(label: str, url: str, rows: list[dict[str, Any]], paths: list[str]) -> None:
    settings = Settings(database_url=url, run_jobs=False, public_read=True)
    seconds = build(settings, rows)
    print(f"{label}: {len(rows):,} records ingested and caught up in {seconds:.0f} s")
    with TestClient(create_app(settings)) as client:
        for k, path in enumerate(paths):
            sep = "&" if "?" in path else "?"
            print(timed(client, f"{path}{sep}nonce={k}" if "dashboard" in path else path))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", type=int, default=200_000)
    parser.add_argument("--services", type=int, default=20_000)
    parser.add_argument("--names", type=int, default=30_000)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    urls: list[str] = []

    def url(name: str) -> str:
        urls.append(fresh_database_url(folder, name))
        return urls[-1]

    if args.tenants:
        last = max(0, args.tenants - 1000)
        run(
            "tenants",
            url("tenants"),
            tenants(args.tenants),
            [
                "/v1/groups?by=tenant",
                f"/v1/groups?by=tenant&offset={last}",
                "/dashboard/data/groups?range=24h&groups=tenant",
            ],
        )
    if args.services:
        run(
            "services",
            url("services"),
            services(args.services),
            ["/v1/findings", "/dashboard/data/findings?range=24h"],
        )
    if args.names:
        run("names", url("names"), names(args.names), ["/v1/findings"])
    for made in urls:
        drop_database(made)


if __name__ == "__main__":
    main()
