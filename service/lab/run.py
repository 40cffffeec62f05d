"""`make lab`: the phases on real engines, measured by a real `cachewatch serve`.

The run: cachewatch serves on a fresh SQLite file with 60 s detection buckets;
each phase sets up its replicas and router, posts its change event, and sends
its traffic; then one detection pass, and the answers of the read API are
compared with what the phases should produce (`verdict`) and with the engine's
own counters. Everything is saved under `.lab/results/<run>/`: `results.json`,
and `records.ndjson.gz` / `events.json`, the fixture a replay test reads.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from openai import AsyncOpenAI

from service.lab import report, screenshot
from service.lab.client import EngineTokens, Lab, Recorder
from service.lab.engines import LabPaths, Managed, ReplicaConfig, start_replica, start_router
from service.lab.phases import ASSISTANT, Phase
from service.lab.traffic import fanouts, sessions
from service.lab.verdict import Window
from service.server_process import free_port, start_server, stop_server

BUCKET_S = 60
#: A lab phase lasts minutes, not hours: the shortest drop it can report, and how
#: long a recovery must hold (production: 30 minutes and 3 hours).
MIN_DURATION_S = 3 * BUCKET_S
RECOVERY_S = 3 * BUCKET_S


@dataclass
class Settings:
    """The knobs of a run (the CLI's options)."""

    phases: tuple[Phase, ...]
    seed: int = 7
    users: int = 3
    turns: int = 8
    fanout_size: int = 6
    replica: ReplicaConfig = field(default_factory=ReplicaConfig)


@dataclass
class Fleet:
    """The running replicas and router."""

    paths: LabPaths
    config: ReplicaConfig
    replicas: list[tuple[Managed, str]] = field(default_factory=list)
    router: Managed | None = None
    router_url: str = ""
    policy: str = ""
    routed: int = 0

    def scale(self, count: int) -> bool:
        changed = False
        while len(self.replicas) < count:
            port = free_port()
            replica = start_replica(self.paths, len(self.replicas), port, self.config)
            self.replicas.append((replica, f"http://127.0.0.1:{port}"))
            changed = True
        return changed

    def route(self, policy: str, count: int) -> None:
        """(Re)start the router when its policy or its workers changed."""
        if self.router is not None and self.policy == policy and count == self.routed:
            return
        if self.router is not None:
            self.router.stop()
        port = free_port()
        workers = [url for _, url in self.replicas[:count]]
        self.router = start_router(self.paths, policy, workers, port, free_port())
        self.router_url, self.policy, self.routed = f"http://127.0.0.1:{port}", policy, count

    def stop(self) -> None:
        if self.router is not None:
            self.router.stop()
        for replica, _ in self.replicas:
            replica.stop()


def _cachewatch_env(db: Path) -> dict[str, str]:
    return {
        **os.environ,
        "CACHEWATCH_DATABASE_URL": f"sqlite:///{db}",
        "CACHEWATCH_DETECT_BUCKET_S": str(BUCKET_S),
        "CACHEWATCH_DETECT_INTERVAL_S": str(BUCKET_S),
        "CACHEWATCH_DETECT_MIN_DURATION_S": str(MIN_DURATION_S),
        "CACHEWATCH_DETECT_RECOVERY_S": str(RECOVERY_S),
        # loopback only: the dashboard's screenshot reads without a login
        "CACHEWATCH_PUBLIC_READ": "true",
    }


def _cli(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "service.cli", *args],
        env=env, check=True, capture_output=True, text=True,
    )  # fmt: skip
    return done.stdout.strip()


def _next_minute(now: float) -> float:
    return math.ceil(now / 60) * 60


async def _sleep_until(ts: float) -> None:
    await asyncio.sleep(max(0.0, ts - time.time()))


def _needs_setup(fleet: Fleet, phase: Phase) -> bool:
    return len(fleet.replicas) < phase.replicas or (fleet.policy, fleet.routed) != (
        phase.policy,
        phase.replicas,
    )


async def _setup(lab: Lab, fleet: Fleet, phase: Phase) -> None:
    """Start the phase's replicas and (re)start its router; the SDK client follows."""
    fleet.scale(phase.replicas)
    fleet.route(phase.policy, phase.replicas)
    lab.openai = AsyncOpenAI(base_url=f"{fleet.router_url}/v1", api_key="lab", max_retries=0,
                             timeout=600)  # fmt: skip


async def _drive(lab: Lab, fleet: Fleet, settings: Settings) -> list[Window]:
    """The phases back to back on whole minutes (cachewatch reads whole minutes).

    A phase that only changes the release starts at the previous one's deadline,
    while the previous phase's last requests finish (they started before the
    deadline, so they stay in their phase). A phase that changes replicas or the
    router first lets every request in flight finish, then starts on the next
    whole minute.
    """
    counters: dict[str, Any] = {"sessions": itertools.count(), "batches": itertools.count()}
    stop = asyncio.Event()
    windows: list[Window] = []
    running: list[asyncio.Task[Any]] = []
    async with httpx.AsyncClient() as http:
        poster = asyncio.create_task(lab.recorder.run(stop))
        try:
            for phase in settings.phases:
                if _needs_setup(fleet, phase) or not windows:
                    await asyncio.gather(*running)
                    running = []
                    await _setup(lab, fleet, phase)
                    start = _next_minute(time.time())
                else:
                    start = windows[-1].end
                await _sleep_until(start)
                await _post_event(lab, http, phase, start)
                deadline = start + phase.minutes * 60
                windows.append(Window(phase.key, start, deadline))
                running.append(
                    asyncio.create_task(_traffic(lab, phase, deadline, settings, counters))
                )
                await _sleep_until(deadline)
                print(f"  {phase.key}: from {start:.0f}, {lab.sent} requests so far", flush=True)
            await asyncio.gather(*running)
        finally:
            stop.set()
            await poster
    return windows


async def _traffic(
    lab: Lab, phase: Phase, deadline: float, settings: Settings, counters: dict[str, Any]
) -> None:
    work = [sessions(lab, phase, deadline, settings.users, settings.turns, counters["sessions"])]
    if phase.fanout:
        work.append(fanouts(lab, phase, deadline, settings.fanout_size, counters["batches"]))
    await asyncio.gather(*work)


async def _post_event(lab: Lab, http: httpx.AsyncClient, phase: Phase, ts: float) -> None:
    if phase.event == "deploy":
        event = {"ts": ts, "service": ASSISTANT, "kind": "deploy", "deploy": phase.release,
                 "description": f"release {phase.release}"}  # fmt: skip
    elif phase.event == "config":
        event = {"ts": ts, "service": ASSISTANT, "kind": "config",
                 "description": f"router policy -> {phase.policy}"}  # fmt: skip
    else:
        return
    await lab.recorder.post_event(http, event)
    lab.recorder.events.append(event)


def run(paths: LabPaths, settings: Settings) -> dict[str, Any]:
    """One whole lab run; returns (and saves) its results."""
    run_id = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    out = paths.results / run_id
    out.mkdir(parents=True, exist_ok=True)
    env = _cachewatch_env(out / "cachewatch.db")
    _cli(env, "migrate")
    token = _cli(env, "token", "create", "--scope", "admin", "--name", "lab")
    port = free_port()
    server = start_server(env, port, out / "cachewatch.log")
    cachewatch = f"http://127.0.0.1:{port}"
    fleet = Fleet(paths, settings.replica)
    began = time.time()
    try:
        fleet.scale(1)
        tokens_url = fleet.replicas[0][1]
        recorder = Recorder(cachewatch, token)
        http = httpx.AsyncClient()
        lab = Lab(AsyncOpenAI(api_key="lab"), EngineTokens(http, tokens_url), recorder, run_id,
                  settings.seed)  # fmt: skip
        print(f"lab run {run_id}: cachewatch at {cachewatch}", flush=True)
        windows = asyncio.run(_drive(lab, fleet, settings))
        engine_totals = report.engine_counters([url for _, url in fleet.replicas])
    finally:
        fleet.stop()
    try:
        results = report.collect(cachewatch, token, windows, recorder, engine_totals, BUCKET_S)
        minutes = math.ceil((windows[-1].end - windows[0].start) / 60) + 2
        view = f"{cachewatch}/?service={ASSISTANT}&range={minutes}m&bucket=1m"
        screenshot.dashboard(view, out / "dashboard.png")
    finally:
        stop_server(server)
    results["run"] = report.describe_run(
        run_id, settings, time.time() - began, ["python", "-m", "service.lab", *sys.argv[1:]], paths
    )
    report.save(out, results, recorder)
    return results
