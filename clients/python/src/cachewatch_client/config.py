"""Where records go and how they are batched: arguments first, then the environment
(`CACHEWATCH_URL`, `CACHEWATCH_TOKEN`, `CACHEWATCH_SERVICE`, `CACHEWATCH_DEPLOY`),
then the defaults below.

Without a URL nothing is sent: the client still measures and counts every call (as
`dropped`), and logs one warning, so an application deployed before its cachewatch
keeps working unchanged.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from .fingerprint import DEFAULT_BLOCK_SIZE

ENV_PREFIX = "CACHEWATCH_"

#: A batch is posted when it holds this many records, or `FLUSH_INTERVAL_S` after
#: its first record, whichever comes first.
BATCH_SIZE = 500
FLUSH_INTERVAL_S = 1.0
#: The queue between the application's calls and the shipper's thread: past either
#: bound a call's record is dropped (and counted), never waited for. A queued call
#: holds its request body until the thread fingerprints it: the byte bound is the
#: client's worst-case memory for them.
MAX_QUEUE = 10_000
MAX_QUEUE_BYTES = 64 * 1024 * 1024
#: One POST's time limit; retries back off from `RETRY_BASE_S` to `RETRY_MAX_S`.
TIMEOUT_S = 10.0
RETRY_BASE_S = 0.5
RETRY_MAX_S = 30.0
#: At interpreter exit, how long the last records may take to leave.
EXIT_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Settings:
    url: str | None
    token: str | None
    service: str
    deploy: str | None = None
    block_size: int = DEFAULT_BLOCK_SIZE
    batch_size: int = BATCH_SIZE
    flush_interval_s: float = FLUSH_INTERVAL_S
    max_queue: int = MAX_QUEUE
    max_queue_bytes: int = MAX_QUEUE_BYTES
    timeout_s: float = TIMEOUT_S
    retry_base_s: float = RETRY_BASE_S
    retry_max_s: float = RETRY_MAX_S
    exit_timeout_s: float = EXIT_TIMEOUT_S

    @classmethod
    def resolve(
        cls,
        *,
        url: str | None = None,
        token: str | None = None,
        service: str | None = None,
        deploy: str | None = None,
        **tuning: Any,
    ) -> Settings:
        """The settings from these arguments, else the environment, else defaults."""
        base = cls(
            url=_given(url, "URL"),
            token=_given(token, "TOKEN"),
            service=_given(service, "SERVICE") or _program_name(),
            deploy=_given(deploy, "DEPLOY"),
        )
        return replace(base, **tuning)

    @property
    def usage_url(self) -> str | None:
        """Where records are posted; None without a URL (an empty one included)."""
        url = (self.url or "").strip()
        return f"{url.rstrip('/')}/v1/usage" if url else None


def _given(value: str | None, name: str) -> str | None:
    if value is not None:
        return value
    return os.environ.get(ENV_PREFIX + name) or None


def _program_name() -> str:
    """The service name when none is given: the running program's name; for
    `python -m package`, the package's (its `__main__.py`'s folder); for `python -c`,
    `python -` or an interactive session, "python"."""
    path = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if path is None or path.name.startswith("-"):
        return "python"
    name = path.parent.name if path.stem == "__main__" else path.stem
    return name[:100] or "python"
