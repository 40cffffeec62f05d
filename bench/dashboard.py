"""Dashboard speed (issue 6; not a test: prints numbers).

Builds D days (default 30) at R requests a day (default 1,000,000) straight into the
rollups: 4 services x 2 models x 8 replicas a minute (minute and hour rows), 3
leading prefixes per (service, model) in the prefix rollups, a 3-hour hit-rate dip
of svc-0 every day, daily deploy events, one scale-out and a KV budget `config`
event, one regression per day for svc-0. Day 0 is generated, the other days are
copies shifted by whole days (as bench/analytics.py does). The newest 20,000
requests of each model are also stored as records (the cap of the capacity replay),
so the capacity panel replays at its worst case; the segment rollups the findings
panel reads (svc-0's system prompt carries a timestamp, svc-1's is rendered two
ways; bench/findings.py times GET /v1/findings on the same data); the analytics cursor is set past
them so no data request recomputes anything.

Then, against a real `cachewatch serve` on that database (public read):
1. the page in Chromium (`/usr/bin/chromium`): first the baseline, a cold page
   loading only plotly.min.js; then navigation start to every panel drawn, for the
   first view (nothing cached: server answers computed, capacity replayed), then
   per run a cold browser (new context, empty cache; server answers cached) and a
   warm one (reload);
2. each data request of the page (series, capacity, tables, findings, groups; the
   bench's rollups hold no group rows, so the groups request is its empty case:
   bench/dashboard_groups.py times it on grouped traffic) for several views:
   computed (a nonce parameter misses the server's answer cache) and cached, and
   each figure's JSON payload (uncompressed) and the bytes sent (gzip).

The machine may be shared: numbers are best (and median) of N runs.

Goals: fully drawn <= 1.5 s, each data request <= 300 ms, each figure <= 1 MB.

    .venv/bin/python bench/dashboard.py [--days 30] [--per-day 1000000]
        [--database-url URL] [--keep DIR] [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import numpy as np  # noqa: E402
import orjson  # noqa: E402
import polars as pl  # noqa: E402
from sqlalchemy import text  # noqa: E402

from dashboards.chromium import CHROMIUM, CHROMIUM_ARGS  # noqa: E402
from service.analytics.definitions import CAUSES  # noqa: E402
from service.rollups import segments  # noqa: E402
from service.server_process import free_port, start_server, stop_server  # noqa: E402

DAY_US = 86_400 * 1_000_000
MINUTE_US = 60 * 1_000_000
HOUR_US = 3600 * 1_000_000
START_US = 1_767_225_600 * 1_000_000  # 2026-01-01T00:00:00Z
SERVICES = [f"svc-{k}" for k in range(4)]
MODELS = ["model-a", "model-b"]
REPLICAS = [f"pod-{k}" for k in range(8)]
PROMPTS = 3
CAPACITY_RECORDS = 20_000


# --- building the database ----------------------------------------------------------


def _ttft_blobs(n: int, rng: np.random.Generator, centre_ms: float) -> list[bytes | None]:
    from service.rollups import histogram

    bins_around = int(np.log(centre_ms / histogram.FLOOR_MS) / np.log(histogram.GAMMA))
    out: list[bytes | None] = []
    for _ in range(n):
        bins = sorted(rng.choice(np.arange(bins_around - 30, bins_around + 60), 12, replace=False))
        out.append(histogram.encode(bins, rng.integers(1, 40, 12).tolist()))
    return out


def day_zero_rollups(per_day: int, grain_s: int, seed: int = 1) -> pl.DataFrame:
    """One day of rollup rows at `grain_s` for every (service, model, replica)."""
    rng = np.random.default_rng(seed + grain_s)
    buckets = 86_400 // grain_s
    hours = (np.arange(buckets) * grain_s / 3600.0) % 24
    curve = 0.15 + np.where((hours > 7) & (hours < 20), np.sin((hours - 7) / 13 * np.pi), 0)
    keys = [(s, m, r) for s in SERVICES for m in MODELS for r in REPLICAS]
    per_row = per_day * curve / curve.sum() / len(keys)
    b_idx = np.repeat(np.arange(buckets), len(keys))
    k_idx = np.tile(np.arange(len(keys)), buckets)
    n = b_idx.size
    requests = rng.poisson(per_row[b_idx]).astype(np.int64) + 1
    prompt = requests * rng.integers(6000, 10_000, n)
    service_idx = k_idx // (len(MODELS) * len(REPLICAS))
    hit = 0.55 + 0.08 * service_idx + rng.normal(0, 0.02, n)
    # svc-0 loses its prefix every day from 13:00 to 16:00 (a dip to detect and show).
    dip = (service_idx == 0) & (hours[b_idx] >= 13) & (hours[b_idx] < 16)
    hit = np.clip(np.where(dip, hit * 0.2, hit), 0, 0.95)
    cacheable_frac = np.clip(np.where(dip, 0.25, 0.86) + rng.normal(0, 0.01, n), 0, 1)
    cached = (prompt * hit).astype(np.int64)
    cacheable = np.maximum((prompt * cacheable_frac).astype(np.int64), cached)
    rewarm_tokens = ((cacheable - cached) * 0.6).astype(np.int64)
    rewarms = (requests * (1 - hit) * 0.5).astype(np.int64)
    split = np.array([0.05, 0.2, 0.1, 0.3, 0.3, 0.05])  # per cause, in CAUSES order
    frame: dict[str, Any] = {
        "grain_s": np.full(n, grain_s, np.int32),
        "bucket_us": START_US + b_idx.astype(np.int64) * grain_s * 1_000_000,
        "service": np.array(SERVICES)[service_idx],
        "model": np.array([m for _, m, _ in keys])[k_idx],
        "deploy": np.full(n, "v1"),
        "replica": np.array([r for _, _, r in keys])[k_idx],
        "requests": requests,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "fp_requests": requests,
        "fp_prompt_tokens": prompt,
        "fp_cached_tokens": cached,
        "cacheable_tokens": cacheable,
        "rewarm_tokens": rewarm_tokens,
        "session_requests": (requests * 0.7).astype(np.int64),
        "history_rewrites": np.zeros(n, np.int64),
        "opening_fp_prompt_tokens": (prompt * 0.3).astype(np.int64),
        "opening_cacheable_tokens": (cacheable * 0.3).astype(np.int64),
        "hits": (requests * hit).astype(np.int64),
        "misses": requests - (requests * hit).astype(np.int64),
    }
    # Priced at Anthropic-style list prices (3.00 / 0.30 / 3.75 per million), so the
    # cost panel and the headline's dollars are drawn at their worst case.
    uncached = prompt - cached
    written = (uncached * 0.2).astype(np.int64)
    frame["cache_write_tokens"] = written
    frame["priced_requests"] = requests
    frame["spend_usd"] = ((uncached - written) * 3.0 + cached * 0.3 + written * 3.75) / 1e6
    wasted = rewarm_tokens * (3.0 - 0.3) / 1e6
    frame["wasted_usd"] = wasted
    for i, cause in enumerate(CAUSES):
        frame[f"rewarms_{cause}"] = (rewarms * split[i]).astype(np.int64)
        frame[f"rewarm_tokens_{cause}"] = (rewarm_tokens * split[i]).astype(np.int64)
        frame[f"wasted_usd_{cause}"] = wasted * split[i]
    out = pl.DataFrame(frame)
    return out.with_columns(
        pl.Series("ttft_hit", _ttft_blobs(n, rng, 220.0), pl.Binary),
        pl.Series("ttft_miss", _ttft_blobs(n, rng, 900.0), pl.Binary),
    )


def day_zero_prefixes(rollups: pl.DataFrame) -> pl.DataFrame:
    """Each rollup row's traffic split over its (service, model)'s 3 leading prefixes."""
    parts = []
    for p, share in enumerate((0.6, 0.3, 0.1)):
        parts.append(
            rollups.select(
                "grain_s",
                "bucket_us",
                "service",
                "model",
                "replica",
                (pl.col("service").str.slice(4).cast(pl.Int64) * 100 + p * 10).alias("first_key"),
                *[
                    (pl.col(c) * share).cast(pl.Int64).alias(c)
                    for c in ("requests", "prompt_tokens", "cached_tokens", "cacheable_tokens")
                ],
                (pl.col("rewarms_routing") * share).cast(pl.Int64).alias("rewarms"),
                (pl.col("rewarm_tokens") * share).cast(pl.Int64).alias("rewarm_tokens"),
            ).with_columns(
                pl.col("first_key") + pl.when(pl.col("model") == "model-a").then(0).otherwise(1)
            )
        )
    return pl.concat(parts)


def capacity_records(days: int, model: str) -> list[dict[str, Any]]:
    """The newest CAPACITY_RECORDS requests of a model, as stored records. Every
    model gets them: views without a model replay the busiest one, which depends on
    which rows are read (the hour rows generated here are not the sums of the
    minute rows, and the chart rollups are derived from the minute rows)."""
    from bench._synthetic import requests  # block_hashes there are the stored blob form

    frame = requests(CAPACITY_RECORDS, start_us=0).with_columns(pl.lit(model).alias("model"))
    # Squeeze them into the last 30 minutes of the data.
    end = START_US + days * DAY_US
    ts = end - 30 * MINUTE_US + (frame["ts_us"] * (30 * MINUTE_US) // DAY_US)
    frame = frame.with_columns(pl.Series("ts_us", ts))
    rows = []
    for i, r in enumerate(frame.iter_rows(named=True)):
        rows.append(
            {
                "request_id": f"cap-{model}-{i}",
                "ts_us": r["ts_us"],
                "received_us": r["ts_us"],
                "service": r["service"],
                "model": model,
                "prompt_tokens": r["prompt_tokens"],
                "cached_tokens": r["cached_tokens"],
                "ttft_ms": r["ttft_ms"],
                "replica": r["replica"],
                "deploy": r["deploy"],
                "session_id": r["session_id"],
                "block_size": r["block_size"],
                "block_hashes": r["block_hashes"],
            }
        )
    return rows


def build(database_url: str, days: int, per_day: int) -> dict[str, Any]:
    from service import migrate, repository
    from service.db import make_engine, make_sessionmaker
    from service.models import ChangeEvent, Regression
    from service.repository import series as chart_queries
    from service.services import chart_rollups
    from service.services.events import dedupe_key
    from service.settings import Settings

    engine = make_engine(Settings(database_url=database_url, run_jobs=False))
    migrate.upgrade(engine)
    started = time.perf_counter()
    counts: dict[str, int] = {}
    with make_sessionmaker(engine).begin() as session:
        for grain in (60, 3600):
            rollups = day_zero_rollups(per_day, grain)
            repository.insert_rollups(session, repository.ROLLUP_TABLE, rollups)
            repository.insert_rollups(session, repository.PREFIX_TABLE, day_zero_prefixes(rollups))
        # Day 0's chart rollups as the analytics pass derives them (the other days
        # are copies, like the rollups they come from).
        chart_started = time.perf_counter()
        chart_rollups.rebuild_from(session, None)
        chart_s = time.perf_counter() - chart_started
        for table, columns in (
            (repository.ROLLUP_TABLE, repository.ROLLUP_VALUE_COLUMNS),
            (repository.PREFIX_TABLE, repository.PREFIX_VALUE_COLUMNS),
            (chart_queries.CHART_TABLE, chart_queries.CHART_COLUMNS),
        ):
            for day in range(1, days):
                exprs = ", ".join(
                    f"bucket_us + {day * DAY_US}" if c == "bucket_us" else c for c in columns
                )
                session.execute(
                    text(
                        f"INSERT INTO {table.name} ({', '.join(columns)}) SELECT {exprs} "
                        f"FROM {table.name} WHERE bucket_us < {START_US + DAY_US}"
                    )
                )
            for grain in (60, 3600):
                counts[f"{table.name}@{grain}"] = int(
                    session.scalar(
                        text(f"SELECT count(*) FROM {table.name} WHERE grain_s = {grain}")
                    )
                    or 0
                )
        chart_rollups.rebuild_prefix_days(session, None)
        repository.set_cursor(session, chart_rollups.MARKER, chart_rollups.VERSION, 0)
        counts["chart_rollups"] = int(
            session.scalar(text("SELECT count(*) FROM chart_rollups")) or 0
        )
        counts["segment_rollups"] = add_segments(session, days, per_day)
        events: list[dict[str, Any]] = []
        for day in range(days):
            for k, service in enumerate(SERVICES):
                events.append(
                    {
                        "ts_us": START_US + day * DAY_US + (10 * 3600 + k * 900) * 1_000_000,
                        "service": service,
                        "kind": "deploy",
                        "deploy": f"v{day + 1}.{k}",
                        "description": f"release v{day + 1}.{k}",
                    }
                )
            session.add(
                Regression(
                    service="svc-0",
                    model="model-a",
                    change_ts_us=START_US + day * DAY_US + 13 * 3_600_000_000,
                    detected_at_us=START_US + day * DAY_US + 13 * 3_600_000_000 + 900_000_000,
                    updated_at_us=START_US + day * DAY_US + 16 * 3_600_000_000,
                    status="resolved",
                    resolved_at_us=START_US + day * DAY_US + 16 * 3_600_000_000,
                    before={"hit_rate": 0.55, "cacheable_fraction": 0.86},
                    after={"hit_rate": 0.11, "cacheable_fraction": 0.25},
                    attributed_event_id=None,
                    attributed_to=None,
                    cause="prefix_instability",
                    evidence=["segment `system` had 1 variant per hour before and 900 after"],
                )
            )
        events.append(
            {
                "ts_us": START_US + (days // 2) * DAY_US,
                "service": "svc-1",
                "kind": "replicas",
                "model": "model-a",
                "replicas": 8,
                "description": "replicas serving 4 -> 8",
            }
        )
        events.append(
            {
                "ts_us": START_US + DAY_US,
                "service": "svc-0",
                "kind": "config",
                "model": "model-a",
                "description": "KV cache budget per replica 1048576 tokens -> 4194304 tokens",
            }
        )
        for event in events:
            row = {"model": None, "deploy": None, "replicas": None, **event, "source": "posted"}
            row["dedupe_key"] = dedupe_key(row)
            session.add(ChangeEvent(created_us=0, **row))
        records = [r for model in MODELS for r in capacity_records(days, model)]
        repository.insert_usage_values(
            session,
            [
                repository.usage_row_values({c: r.get(c) for c in repository.USAGE_COLUMNS})
                for r in records
            ],
        )
        # Nothing for the analytics pass to do: the rollups above are the truth here.
        top = repository.max_usage_id(session)
        repository.set_cursor(session, "usage", top, 0)
    engine.dispose()
    return {"seconds": time.perf_counter() - started, "rows": counts, "chart_s": chart_s}


# --- segment rollups (the findings' evidence) ----------------------------------------


def _row(key: tuple[int, str, str], name: str, hash_: str, n: int, **more: Any) -> dict[str, Any]:
    bucket, service, model = key
    return {
        "bucket_us": bucket,
        "service": service,
        "model": model,
        "scenario": more.get("scenario", ""),
        "name": name,
        "hash": hash_,
        "norm_hash": more.get("norm_hash"),
        "tokens": more.get("tokens", 800),
        "folded": more.get("folded", 0),
        "requests": n,
        "prompt_tokens": n * 3000,
        "lost_tokens": more.get("lost", 0),
    }


def _system_rows(key: tuple[int, str, str], per_hour: int) -> list[dict[str, Any]]:
    service = key[1]
    if service == "svc-0":  # a timestamp: every request its own variant, compacted
        return [
            _row(key, "system", segments.FOLDED_HASH, per_hour, folded=per_hour,
                 lost=per_hour * 800),
        ]  # fmt: skip
    if service == "svc-1":  # two renderings of one prompt
        return [
            _row(key, "system", "sys-a", per_hour * 6 // 10, norm_hash="n", scenario="web-chat"),
            _row(key, "system", "sys-b", per_hour * 4 // 10, norm_hash="n", scenario="api-agent",
                 tokens=801, lost=per_hour // 100 * 800),
        ]  # fmt: skip
    return [_row(key, "system", "sys-1", per_hour)]


def day_zero_segments(per_day: int) -> pl.DataFrame:
    """One day of segment rollups for every (service, model) of the dashboard bench."""
    per_hour = per_day // 24 // (len(SERVICES) * len(MODELS))
    rows = []
    for hour in range(24):
        for service in SERVICES:
            for model in MODELS:
                key = (START_US + hour * HOUR_US, service, model)
                rows.append(_row(key, "tools", "tools-1", per_hour, tokens=1200))
                rows.extend(_system_rows(key, per_hour))
    return pl.DataFrame(rows, schema=segments.SCHEMA)


def add_segments(session: Any, days: int, per_day: int) -> int:
    """Day 0's segment rollups, copied to the other days; the rows in all."""
    from service.repository import segments as segments_repo

    segments_repo.insert_segment_rollups(session, day_zero_segments(per_day))
    columns = list(segments.SCHEMA)
    for day in range(1, days):
        exprs = ", ".join(f"bucket_us + {day * DAY_US}" if c == "bucket_us" else c for c in columns)
        session.execute(
            text(
                f"INSERT INTO segment_rollups ({', '.join(columns)}) SELECT {exprs} "
                f"FROM segment_rollups WHERE bucket_us < {START_US + DAY_US}"
            )
        )
    return int(session.scalar(text("SELECT count(*) FROM segment_rollups")) or 0)


# --- the server -------------------------------------------------------------------------


@contextmanager
def server(database_url: str, log_path: Path) -> Iterator[str]:
    """`cachewatch serve` with public read and no background jobs."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEWATCH_")}
    env |= {
        "CACHEWATCH_DATABASE_URL": database_url,
        "CACHEWATCH_PUBLIC_READ": "true",
        "CACHEWATCH_RUN_JOBS": "false",
    }
    process = start_server(env, port, log_path, cwd=ROOT, timeout_s=120)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_server(process)


VIEWS = {
    "default (7 days, all)": "",
    "6 hours, all (1m buckets)": "range=6h",
    "24 hours, all": "range=24h",
    "30 days, all": "range=30d",
    "30 days, svc-0 / model-a": "range=30d&service=svc-0&model=model-a",
    "30 days, bucket=1m (raised)": "range=30d&bucket=1m",
    "24 hours, bucket=5m (asked)": "range=24h&bucket=5m",
}


def time_requests(url: str, repeat: int) -> list[dict[str, Any]]:
    """Each data request computed (a nonce parameter misses the server's answer
    cache) and answered from that cache (the same URL again)."""
    rows: list[dict[str, Any]] = []
    with httpx.Client(base_url=url, timeout=120, headers={"Accept-Encoding": "gzip"}) as client:
        for label, query in VIEWS.items():
            for panel in ("series", "capacity", "tables", "findings", "groups"):
                path = f"/dashboard/data/{panel}?{query}"
                if panel == "capacity":  # the first call may start the replay: let it end
                    for _ in range(300):
                        if client.get(path).status_code == 200:
                            break
                        time.sleep(0.2)
                computed, cached, sent = [], [], 0
                answer: httpx.Response | None = None
                for i in range(repeat):
                    started = time.perf_counter()
                    client.get(f"{path}&nonce={time.time_ns()}-{i}")
                    computed.append(time.perf_counter() - started)
                    started = time.perf_counter()
                    answer = client.get(path)
                    cached.append(time.perf_counter() - started)
                    sent = int(answer.headers.get("content-length", len(answer.content)))
                assert answer is not None and answer.status_code == 200, answer
                sizes = figure_sizes(answer.json())
                detail = ", ".join(f"{k} {v / 1024:.0f} KiB" for k, v in sizes.items())
                best, median = min(computed) * 1000, statistics.median(computed) * 1000
                rows.append(
                    {
                        "best_ms": best,
                        "cached_ms": min(cached) * 1000,
                        "largest_figure": max(sizes.values(), default=0),
                    }
                )
                print(
                    f"  {label:30} {panel:8} computed best {best:5.0f} ms median {median:5.0f} ms;"
                    f" cached {min(cached) * 1000:4.0f} ms; sent {sent / 1024:.0f} KiB"
                    + (f"; figures: {detail}" if detail else "")
                )
    return rows


def figure_sizes(payload: dict[str, Any]) -> dict[str, int]:
    if "figures" in payload:
        return {k: len(orjson.dumps(v)) for k, v in payload["figures"].items() if v}
    if payload.get("figure"):
        return {"capacity": len(orjson.dumps(payload["figure"]))}
    if (payload.get("canary") or {}).get("figure"):
        return {"canary": len(orjson.dumps(payload["canary"]["figure"]))}
    return {}


def plotly_floor(browser: Any, url: str, repeat: int) -> list[float]:
    """The baseline in the same run: a cold page that only loads the server's
    plotly.min.js (the URL, compression and caching the dashboard uses) and notes
    when it is evaluated. The dashboard cannot draw before that."""
    from dashboards.page import static_url

    floor_page = (
        f'<!doctype html><html><body><script src="{static_url("plotly.min.js")}"></script>'
        "<script>document.body.dataset.at = String(Math.round(performance.now()))</script>"
        "</body></html>"
    )
    times = []
    for _ in range(repeat):
        context = browser.new_context()
        page = context.new_page()
        page.route(
            f"{url}/__plotly_floor",
            lambda route, _request: route.fulfill(body=floor_page, content_type="text/html"),
        )
        page.goto(f"{url}/__plotly_floor")
        page.wait_for_function("() => document.body.dataset.at", timeout=60_000)
        times.append(float(page.evaluate("() => document.body.dataset.at")))
        context.close()
    return times


def time_browser(url: str, repeat: int) -> list[tuple[str, str, float]]:
    from playwright.sync_api import sync_playwright

    out = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        floor = plotly_floor(browser, url, repeat)
        print(
            f"  {'baseline: plotly.min.js alone':32} cold: best {min(floor):6.0f} ms, median "
            f"{statistics.median(floor):6.0f} ms (navigation start to Plotly defined)"
        )
        out.append(("plotly.min.js alone", "floor", min(floor)))
        for label, query in list(VIEWS.items())[:4]:
            colds, warms, first = [], [], None
            for _ in range(repeat):
                context = browser.new_context(viewport={"width": 1400, "height": 900})
                page = context.new_page()
                errors: list[str] = []
                page.on(
                    "console", lambda m, e=errors: e.append(m.text) if m.type == "error" else None
                )
                for target in (colds, warms):
                    if target is colds:
                        page.goto(f"{url}/?{query}")
                    else:
                        page.reload()
                    page.wait_for_function("() => document.body.dataset.drawn", timeout=60_000)
                    state = page.evaluate("() => document.body.dataset.drawn")
                    if state != "true":
                        line = page.text_content("#view-line")
                        raise RuntimeError(f"{label}: the page did not draw: {line}")
                    drawn_at = float(page.evaluate("() => document.body.dataset.drawnAt"))
                    first = drawn_at if first is None else first
                    target.append(drawn_at)
                    page.evaluate("() => { delete document.body.dataset.drawn; }")
                if errors:
                    raise RuntimeError(f"console errors: {errors}")
                context.close()
            print(f"  {label:32} first view (nothing cached anywhere): {first:6.0f} ms")
            for kind, values in (("cold", colds), ("warm", warms)):
                out.append((label, kind, min(values)))
                print(
                    f"  {label:32} {kind}: best {min(values):6.0f} ms, median "
                    f"{statistics.median(values):6.0f} ms (navigation start to all drawn)"
                )
        browser.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--per-day", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--database-url", help="an empty database (default: SQLite in --keep)")
    parser.add_argument("--keep", help="folder for the SQLite database; reused when present")
    args = parser.parse_args()

    folder = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="cw-dash-"))
    folder.mkdir(parents=True, exist_ok=True)
    url = args.database_url or f"sqlite:///{folder / 'dashboard.db'}"
    fresh = args.database_url is not None or not (folder / "dashboard.db").exists()
    print(f"== database: {url.split('@')[-1]} ==")
    if fresh:
        built = build(url, args.days, args.per_day)
        rows = ", ".join(f"{k} {v:,}" for k, v in built["rows"].items())
        print(
            f"built {args.days} days x {args.per_day:,} requests in {built['seconds']:.0f} s"
            f" (day 0's chart rollups derived in {built['chart_s']:.1f} s)"
        )
        print(f"rows: {rows}")
    else:
        print("reusing the database built before")
    try:
        with server(url, folder / "server.log") as base:
            # The browser first: its first load of each view finds no cached answer.
            if Path(CHROMIUM).exists():
                print(f"\n== 1. page load in Chromium ({args.repeat} runs each) ==")
                loads = time_browser(base, args.repeat)
            else:
                print(f"\n{CHROMIUM} is missing: no page-load timing")
                loads = []
            print(f"\n== 2. data requests ({args.repeat} runs each; figure sizes uncompressed) ==")
            requests = time_requests(base, args.repeat)
    finally:
        if not args.keep and args.database_url is None:
            shutil.rmtree(folder, ignore_errors=True)

    worst_request = max(r["best_ms"] for r in requests)
    worst_load = max((r[2] for r in loads if r[1] == "cold"), default=float("nan"))
    biggest = max(r["largest_figure"] for r in requests)
    print("\n== summary (best of runs, slowest view) ==")
    print(f"slowest data request, computed: {worst_request:.0f} ms (goal <= 300 ms)")
    print(f"slowest data request, cached: {max(r['cached_ms'] for r in requests):.0f} ms")
    print(f"slowest cold page load, all drawn: {worst_load:.0f} ms (goal <= 1500 ms)")
    floor = next((r[2] for r in loads if r[1] == "floor"), float("nan"))
    print(
        f"  of which plotly.min.js alone takes {floor:.0f} ms cold (same run): "
        f"page / plotly alone = {worst_load / floor:.2f}"
    )
    print(f"largest figure payload: {biggest / 1024:.0f} KiB (goal <= 1024 KiB)")


if __name__ == "__main__":
    main()
