"""Block hashes inferred from usage alone, for a coding agent's calls that carry no
request body (Claude Code's `api_request` events without `OTEL_LOG_RAW_API_BODIES`).

A session of a coding agent sends its whole history on every call and appends to
it; the provider's usage says how much of each prompt it read from the cache. So
a session's calls are given blocks standing for an append-only history: block j
of every call of a session thread (session, thread, model) has the same hash, as
long as usage shows nothing else. What usage shows, against the thread's previous
call and its TTL (`start_changed`: the transcript importer's rule too):

* within the TTL, nothing read and most of the prompt written again: the start
  (system prompt, tools) changed. Every block is new (a new generation).
* within the TTL, less read than the previous prompt (a tenth of it is slack): the
  history was rewritten (a compaction, an edited turn) from the first block not
  read. Blocks from there on are new.
* after the TTL: nothing changes. The blocks are seen, so what the call did not
  read is an `expiry` rewarm for the analytics: the cost of the coffee break.

The history-rewrite rule and the ceiling then read these blocks as they read
real ones: an inference, marked as such in docs/integrations.md. Each call also
gets a `system+tools` segment whose hash changes with the start's generation, so
an agent whose start keeps changing is a `volatile_segment` finding on it. Records with a
body's real fingerprint never get these.

In-process and bounded (`max_threads`, the least recently seen go first); a call
older than its thread's previous one (a replayed export) gets none.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from cachewatch_client.fingerprint import DEFAULT_BLOCK_SIZE, MAX_BLOCKS
from service.ingest.shapes import usage_fields

#: The segment standing for what comes before a coding agent's messages (its system
#: prompt and tools) when the request body is not seen.
START_SEGMENT = "system+tools"
#: A call that wrote at least this share of its prompt again, reading nothing.
BUSTED_WRITE_SHARE = 0.5
#: Slack on "read less than the previous prompt": providers cache in increments.
REWRITE_SLACK = 0.1
_DIGEST = 8


def start_changed(prompt: int, cached: int, written: int) -> bool:
    """A call within the TTL of its thread's previous one that read nothing and
    wrote at least `BUSTED_WRITE_SHARE` of its prompt again: something before the
    messages changed."""
    return cached == 0 and written >= BUSTED_WRITE_SHARE * prompt > 0


@dataclass(frozen=True)
class Usage:
    """What a call's usage says: its time, prompt, cached and written tokens, and
    the TTL of what it wrote."""

    ts_s: float
    prompt: int
    cached: int
    written: int
    ttl_s: float


def read_usage(usage: dict[str, Any], ts_s: float, ttl_s: float) -> Usage | None:
    """A provider's usage object read as the server reads it
    (`service.ingest.shapes.usage_fields`: one definition of prompt, cached and
    written tokens), at `ts_s`; its TTL the usage's own (Anthropic's one-hour
    writes), else `ttl_s`. None when a count is not valid (validation says why)."""
    fields = usage_fields(usage, "usage", None)
    prompt, cached, written = (
        fields.get(n) for n in ("prompt_tokens", "cached_tokens", "cache_write_tokens")
    )
    if not (_count(prompt) and _count(cached) and _count(written)):
        return None
    own = fields.get("cache_ttl_s")
    return Usage(ts_s, prompt, cached, written, float(own) if type(own) is int else ttl_s)


def _count(value: Any) -> TypeGuard[int]:
    return type(value) is int and value >= 0


@dataclass(frozen=True)
class Inferred:
    """A call's inferred fingerprint: its block hashes, and its start's segment."""

    block_hashes: list[str]
    start: dict[str, object]


@dataclass
class _Thread:
    previous: Usage
    start_tokens: int  # the thread's first prompt: its start and a first question
    generation: int = 0
    # (first block, tag) of each stretch of the history: a rewrite starts one.
    stretches: list[tuple[int, str]] = field(default_factory=lambda: [(0, "")])


class UsageBlocks:
    """Per session thread, the inferred blocks of its calls, in order."""

    def __init__(self, max_threads: int = 10_000, block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        self.block_size = block_size
        self._max_threads = max_threads
        self._threads: OrderedDict[str, _Thread] = OrderedDict()
        self._lock = threading.Lock()

    def blocks(self, key: str, usage: Usage) -> Inferred | None:
        """The call's inferred fingerprint, or None for a call older than the
        thread's last."""
        with self._lock:
            thread = self._threads.get(key)
            if thread is None:
                thread = self._threads[key] = _Thread(usage, usage.prompt)
            elif usage.ts_s < thread.previous.ts_s:
                return None
            else:
                self._follow(thread, usage)
            self._threads.move_to_end(key)
            while len(self._threads) > self._max_threads:
                self._threads.popitem(last=False)
            return Inferred(self._hashes(key, thread, usage.prompt), self._start(key, thread))

    def _start(self, key: str, thread: _Thread) -> dict[str, object]:
        """The `START_SEGMENT` segment: one hash for every thread's first start
        (nothing tells them apart), one of its own for each start that changed, so
        many changed starts make a `volatile_segment` finding on it. Its tokens: the
        thread's first prompt (its start and a first question, a bound)."""
        changed = hashlib.blake2b(f"{key}/{thread.generation}".encode(), digest_size=_DIGEST)
        digest = "start-0" if not thread.generation else changed.hexdigest()
        return {"name": START_SEGMENT, "hash": digest, "tokens": thread.start_tokens}

    def _follow(self, thread: _Thread, usage: Usage) -> None:
        """What usage says changed since the thread's previous call (module docstring)."""
        before = thread.previous
        thread.previous = usage
        if usage.ts_s - before.ts_s > before.ttl_s:
            return  # expired, or not: the blocks stand
        if start_changed(usage.prompt, usage.cached, usage.written):
            thread.generation += 1
            thread.stretches = [(0, "")]
            return
        if usage.cached < (1 - REWRITE_SLACK) * min(before.prompt, usage.prompt):
            first = usage.cached // self.block_size
            thread.stretches = [s for s in thread.stretches if s[0] < first]
            thread.stretches.append((first, f"{first}@{usage.ts_s!r}"))

    def _hashes(self, key: str, thread: _Thread, prompt: int) -> list[str]:
        count = min(MAX_BLOCKS, -(-prompt // self.block_size))
        salt = f"{key}/{thread.generation}".encode()
        hashes, previous = [], hashlib.blake2b(salt, digest_size=_DIGEST).digest()
        stretches = iter(thread.stretches[1:])
        tag, upcoming = "", next(stretches, None)
        for j in range(count):
            if upcoming is not None and j >= upcoming[0]:
                tag, upcoming = upcoming[1], next(stretches, None)
            previous = hashlib.blake2b(previous + tag.encode(), digest_size=_DIGEST).digest()
            hashes.append(previous.hex())
        return hashes
