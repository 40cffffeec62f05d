"""A managed API's prompt cache, Anthropic-style: what a caller of a managed
provider sees instead of replicas with KV caches.

The rules modelled, from Anthropic's "Prompt caching" documentation
(<https://platform.claude.com/docs/en/build-with-claude/prompt-caching>, as
quoted by the gateways that document it, read 2026-12; docs/providers.md lists
the figures cachewatch itself assumes):

1. Scope: the cache belongs to the provider's account and the model, not to a
   server the caller picks. Nothing is routed, and records name no replica.
2. Minimum: a prompt shorter than the model's minimum cacheable length (1,024
   tokens for Claude Sonnet and Opus, 2,048 for the older Haikus) "cannot be
   cached", even when marked: nothing is read and nothing is written.
3. Read: the provider finds the longest cached prefix of the prompt (it checks
   earlier block boundaries for hits). Here, at the simulator's block
   granularity: the longest leading run of live blocks (`cache_read_input_tokens`).
4. Write: callers mark the end of their prompt (`cache_control` on the last
   block, the documented multi-turn pattern; automatic caching moves that mark
   forward as the conversation grows), so all the rest of a cacheable prompt is
   written (`cache_creation_input_tokens`) and none is plain input.
5. Lifetime: an entry lives `ttl` after its last use, the `ttl` that use asked
   for: "refreshed for no additional cost each time the cached content is
   used"; 5 minutes by default, 1 hour with `"ttl": "1h"`. The documentation
   does not say what a 5-minute read does to an entry written for an hour; this
   takes "refreshed" literally, which is also the test of cause `expiry`
   (contract section 4: the gap since the prefix's last use against the
   request's TTL).
6. Readiness: "a cache entry only becomes available after the first response
   begins": what a request writes is readable from the end of its prefill (its
   TTFT), so requests sent together on a cold prefix all write it.

No capacity: the documentation names no eviction but expiry.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

_NEVER = float("inf")


@dataclass(frozen=True, slots=True)
class Served:
    """One request's input tokens as the provider bills them."""

    read: int  # from the cache
    written: int  # to the cache
    uncached: int  # neither (a prompt below the minimum)

    @property
    def prompt_tokens(self) -> int:
        return self.read + self.written + self.uncached


def split_prompt(prompt_tokens: int, run: int, block_size: int, min_prompt_tokens: int) -> Served:
    """Rules 2 to 4: a prompt below the minimum is all plain input; otherwise the
    leading `run` live blocks are read and the rest is written."""
    if prompt_tokens < min_prompt_tokens:
        return Served(0, 0, prompt_tokens)
    read = min(prompt_tokens, run * block_size)
    return Served(read, prompt_tokens - read, 0)


def anthropic_usage(served: Served, ttl_s: float, output_tokens: int) -> dict[str, Any]:
    """The Messages API's `usage` object for a request served as `served` that
    asked for `ttl_s` (its writes count as 1-hour ones at 3600 s and more)."""
    long_ttl = ttl_s >= 3600.0
    return {
        "input_tokens": served.uncached,
        "cache_creation_input_tokens": served.written,
        "cache_read_input_tokens": served.read,
        "cache_creation": {
            "ephemeral_5m_input_tokens": 0 if long_ttl else served.written,
            "ephemeral_1h_input_tokens": served.written if long_ttl else 0,
        },
        "output_tokens": output_tokens,
    }


class PromptCache:
    """The prompt cache of one (provider, model), whose minimum cacheable prompt is
    `min_prompt_tokens`: rules 1 to 6 of the module.

    Entries are chained block hashes, each with the time it becomes readable and
    the time it expires. Kept in order of last use: expired entries are dropped
    from the least recently used end as time passes, so memory holds what was
    used within the longest TTL (a 1-hour entry there that outlives 5-minute ones
    used after it stops the sweep early; lookups check expiry anyway).
    """

    __slots__ = ("min_prompt_tokens", "ready", "until")

    def __init__(self, min_prompt_tokens: int) -> None:
        self.min_prompt_tokens = min_prompt_tokens
        self.ready: dict[int | str, float] = {}
        self.until: OrderedDict[int | str, float] = OrderedDict()

    def lookup(self, hashes: Sequence[int | str], now: float) -> int:
        """Leading blocks readable at `now` (no side effect)."""
        ready, until = self.ready, self.until
        run = 0
        for h in hashes:
            if ready.get(h, _NEVER) > now or until[h] < now:
                break
            run += 1
        return run

    def read(
        self, hashes: Sequence[int | str], prompt_tokens: int, block_size: int, now: float
    ) -> Served:
        """How a request arriving at `now` is served (no side effect: `write` then
        records it, once its TTFT is known)."""
        if prompt_tokens < self.min_prompt_tokens:
            return split_prompt(prompt_tokens, 0, block_size, self.min_prompt_tokens)
        run = self.lookup(hashes, now)
        return split_prompt(prompt_tokens, run, block_size, self.min_prompt_tokens)

    def write(
        self,
        hashes: Sequence[int | str],
        served: Served,
        block_size: int,
        now: float,
        ready_at: float,
        ttl_s: float,
    ) -> None:
        """Record a request served as `served` at `now`: the blocks it read and
        those it wrote (readable from `ready_at`, unless another request is
        already writing them) all live `ttl_s` from `now`. A prompt below the
        minimum leaves no trace."""
        if served.uncached:
            return
        run = -(-served.read // block_size)  # the read blocks, a partial last one included
        ready, until = self.ready, self.until
        move = until.move_to_end
        expires = now + ttl_s
        for i in range(run, len(hashes)):
            if until.get(hashes[i], -_NEVER) < now:
                ready[hashes[i]] = ready_at  # new, or expired and written again
        for h in hashes:
            until[h] = expires
            move(h)
        self.sweep(now)

    def sweep(self, now: float) -> None:
        """Forget the least recently used entries that have expired."""
        until, ready = self.until, self.ready
        while until:
            h, expires = next(iter(until.items()))
            if expires >= now:
                return
            del until[h]
            del ready[h]

    def __len__(self) -> int:
        return len(self.until)
