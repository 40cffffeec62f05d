"""A transcript thread's calls as the prompt cache saw them: when its start (the
system prompt and tools, not in the transcript) changed, and how many tokens its
blocks stand for. Pure; `service.importers.claude_code` reads the lines.

**Starts.** A call that read nothing from the cache and wrote most of its prompt
again (`usage_blocks.start_changed`) within the TTL of its thread's previous
call (5 minutes, Anthropic's; an hour when that call wrote the one-hour cache,
as the server reads its usage) found something
before the messages changed: a new *generation* of the start. A longer pause keeps
the generation (that is expiry, and the analytics count it).

**Sizes.** A record's `cacheable_tokens` and the history-rewrite rule count a
record's blocks against its `prompt_tokens`, so the blocks must stand for about
as many tokens as the prompt had. The messages' estimate (4 bytes a token) and
the real count differ, and the start is not shown at all. So each thread is
fitted once all its calls are read, by least squares over its calls: prompt
tokens = start + k * estimated message tokens. The start becomes start / size
blocks and every block stands for size = 128 * k tokens (`block_size`, per thread:
threads share no block, so their sizes need not agree). A thread read again after
it grew is fitted again: its first new call may then not find the last old one's
blocks (one false rewrite at the resume point).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from cachewatch_client.fingerprint import DEFAULT_BLOCK_SIZE, MAX_BLOCKS, RecordFields
from cachewatch_client.fingerprint.conversation import Conversation
from service.ingest.usage_blocks import START_SEGMENT, Usage, read_usage, start_changed
from service.profiles.builtins import FIVE_MINUTES_S

#: The fitted tokens per estimated token is kept within these bounds.
SCALE_BOUNDS = (0.25, 8.0)
_DIGEST = 8


@dataclass
class _Call:
    """A call's fingerprint before sizing: its generation, prompt and messages'."""

    generation: int
    prompt: int
    fields: RecordFields
    shown: int


@dataclass
class Thread:
    """One session thread's calls, in order."""

    name: str  # session / thread: what salts its blocks
    generation: int = 0
    busted: int = 0
    previous_ts: float | None = None
    previous_ttl_s: float = FIVE_MINUTES_S
    calls: list[_Call] = field(default_factory=list)
    _conversation: Conversation | None = None

    def add(self, usage: dict[str, Any], ts: float, messages: list[tuple[str, Any]]) -> int:
        """The next call (its API usage object, time and messages); returns its
        index. The usage is read as the server reads it (`read_usage`)."""
        read = read_usage(usage, ts, FIVE_MINUTES_S) or Usage(ts, 0, 0, 0, FIVE_MINUTES_S)
        prompt, cached, written = read.prompt, read.cached, read.written
        if self._busted(prompt, cached, written, ts):
            self.generation += 1
            self.busted += 1
            self._conversation = None
        if self._conversation is None:
            self._conversation = Conversation(salt=self._salt(self.generation))
        fields = self._conversation.fingerprint(messages)
        shown = sum(s["tokens"] for s in fields["segments"])
        self.calls.append(_Call(self.generation, prompt, fields, shown))
        self.previous_ts = ts
        self.previous_ttl_s = read.ttl_s
        return len(self.calls) - 1

    def fingerprints(self) -> list[dict[str, Any]]:
        """Each call's record fields, sized by the thread's fit (module docstring)."""
        start, scale = self._fit()
        size = max(1, round(DEFAULT_BLOCK_SIZE * scale))
        starts: dict[int, list[str]] = {}
        out = []
        for call in self.calls:
            if call.generation not in starts:
                key = self._salt(call.generation)
                starts[call.generation] = [
                    _hash(key, b"/start/", i.to_bytes(4, "big")) for i in range(start // size)
                ]
            segment = {"name": START_SEGMENT, "hash": self._start_hash(call), "tokens": start}
            messages = [
                {**s, "tokens": round(s["tokens"] * scale)} for s in call.fields["segments"]
            ]
            out.append(
                {
                    "block_size": size,
                    "block_hashes": [*starts[call.generation], *call.fields["block_hashes"]][
                        :MAX_BLOCKS
                    ],
                    "segments": [segment, *messages],
                }
            )
        return out

    def _busted(self, prompt: int, cached: int, written: int, ts: float) -> bool:
        if self.previous_ts is None or ts - self.previous_ts > self.previous_ttl_s:
            return False
        return start_changed(prompt, cached, written)

    def _fit(self) -> tuple[int, float]:
        """(start tokens, tokens per estimated token) by least squares."""
        n = len(self.calls)
        xs = [c.shown for c in self.calls]
        ys = [c.prompt for c in self.calls]
        mean_x, mean_y = sum(xs) / n, sum(ys) / n
        spread = sum((x - mean_x) ** 2 for x in xs)
        scale = 1.0
        if spread > 0:
            scale = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
        scale = min(max(scale, SCALE_BOUNDS[0]), SCALE_BOUNDS[1])
        return max(0, round(mean_y - scale * mean_x)), scale

    def _salt(self, generation: int) -> bytes:
        return f"{self.name}/{generation}".encode()

    def _start_hash(self, call: _Call) -> str:
        """The `system+tools` segment's hash: one for every thread's first start
        (nothing tells them apart), one of its own for each start that changed."""
        return "start-0" if not call.generation else _hash(self._salt(call.generation))


def _hash(*parts: bytes) -> str:
    return hashlib.blake2b(b"".join(parts), digest_size=_DIGEST).hexdigest()
