"""What several benches do alike: run one of their measures in a fresh process
with another checkout's code (`--code DIR`), so its peak RSS and its imports are
its own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


def run_worker(script: str, code: Path, *args: str) -> dict[str, Any]:
    """`script --code CODE --worker ARGS...` in a subprocess with CODE's service on
    the path; the JSON object of its last output line."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    done = subprocess.run(
        [sys.executable, script, "--code", str(code), "--worker", *args],
        capture_output=True,
        env=env,
        cwd=code,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"worker {args} failed: {done.stderr.decode()[-2000:]}")
    return dict(json.loads(done.stdout.decode().strip().splitlines()[-1]))
