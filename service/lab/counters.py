"""The engines' own prefix-cache token counters, read from their Prometheus `/metrics`
text: what cachewatch's numbers are checked against (docs/lab.md, "Engine counters";
docs/integrations.md, "The engine's own counters").

Each engine says it differently; all are token counts, turned here into tokens
prefilled and tokens served from the cache:

- llama.cpp's `llama-server --metrics`: `llamacpp:prompt_tokens_total` (prefilled)
  and `llamacpp:prompt_tokens_cached_total`.
- vLLM: `vllm:prefix_cache_queries` (prompt tokens looked up) and
  `vllm:prefix_cache_hits` (those found), or the deprecated
  `vllm:gpu_prefix_cache_queries` / `vllm:gpu_prefix_cache_hits` of earlier
  versions. A server exposing both names counts the same tokens twice, so the
  current names win where present.
- SGLang: `sglang:prompt_tokens_total` and `sglang:cached_tokens_total`, summed
  over its `cache_source` label (device, host, storage). Its `sglang:cache_hit_rate`
  gauge is a ratio of the moment, not a count: not read.

Parsed by prometheus_client's own exposition parser; a counter is read from its
`<name>_total` samples, whether the text declares it a counter or not at all.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

#: (queries, hits) of vLLM's prefix cache, current names first.
_VLLM = (
    ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"),
    ("vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total"),
)


@dataclass(frozen=True)
class EngineTokens:
    """Prompt tokens an engine prefilled and served from its cache, and which of its
    counters said so (empty: none it knows)."""

    prefilled: float
    cached: float
    counters: tuple[str, ...]

    def __add__(self, other: EngineTokens) -> EngineTokens:
        counters = tuple(dict.fromkeys(self.counters + other.counters))
        return EngineTokens(self.prefilled + other.prefilled, self.cached + other.cached, counters)


NONE = EngineTokens(0.0, 0.0, ())


def engine_tokens(text: str) -> EngineTokens:
    """The token counters of one engine's `/metrics` text (module docstring)."""
    totals = _counter_totals(text)
    if "llamacpp:prompt_tokens_total" in totals:
        names = ("llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total")
        return EngineTokens(totals[names[0]], totals.get(names[1], 0.0), names)
    for queries, hits in _VLLM:
        if queries in totals:
            found = totals.get(hits, 0.0)
            return EngineTokens(totals[queries] - found, found, (queries, hits))
    if "sglang:prompt_tokens_total" in totals:
        names = ("sglang:prompt_tokens_total", "sglang:cached_tokens_total")
        cached = totals.get(names[1], 0.0)
        return EngineTokens(totals[names[0]] - cached, cached, names)
    return NONE


def _counter_totals(text: str) -> dict[str, float]:
    """Each `_total` sample summed over its labels (a vLLM server labels by model,
    SGLang's cached tokens by cache source), by sample name."""
    totals: dict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(text):
        if family.type not in ("counter", "unknown"):
            continue
        for sample in family.samples:
            if sample.name.endswith("_total"):
                totals[sample.name] += sample.value
    return dict(totals)
