"""The engines' prefix-cache counters (`service.lab.counters`), from /metrics text
as each engine exposes it: vLLM's and SGLang's written by prometheus_client's own
registry (what both servers export through), llama.cpp's as llama-server writes it."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from service.lab.counters import NONE, EngineTokens, engine_tokens
from tests.conftest import is_postgres_run

pytestmark = pytest.mark.skipif(is_postgres_run(), reason="touches no database: run once")

LLAMA_CPP = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1200
# HELP llamacpp:prompt_tokens_cached_total Number of prompt tokens served from the cache.
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 800
# HELP llamacpp:kv_cache_usage_ratio KV-cache usage.
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.4
"""


def _vllm(prefix: str, models: dict[str, tuple[int, int]]) -> str:
    registry = CollectorRegistry()
    queries = Counter(f"vllm:{prefix}prefix_cache_queries", "tokens queried", ["model_name"],
                      registry=registry)  # fmt: skip
    hits = Counter(f"vllm:{prefix}prefix_cache_hits", "tokens hit", ["model_name"],
                   registry=registry)  # fmt: skip
    for model, (asked, found) in models.items():
        queries.labels(model).inc(asked)
        hits.labels(model).inc(found)
    return generate_latest(registry).decode()


def test_llama_cpp() -> None:
    names = ("llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total")
    assert engine_tokens(LLAMA_CPP) == EngineTokens(1200.0, 800.0, names)


@pytest.mark.parametrize("prefix", ["", "gpu_"], ids=["current", "deprecated"])
def test_vllm_current_and_deprecated_names(prefix: str) -> None:
    """Queries are the prompt tokens looked up, hits those found; summed over the
    server's model label."""
    text = _vllm(prefix, {"llama-3-8b": (5000, 3000), "qwen-2-7b": (1000, 250)})
    tokens = engine_tokens(text)
    assert (tokens.prefilled, tokens.cached) == (2750.0, 3250.0)
    assert tokens.counters[0] == f"vllm:{prefix}prefix_cache_queries_total"


def test_vllm_exposing_both_names_is_counted_once() -> None:
    both = _vllm("", {"m": (5000, 3000)}) + _vllm("gpu_", {"m": (5000, 3000)})
    assert (engine_tokens(both).prefilled, engine_tokens(both).cached) == (2000.0, 3000.0)


def test_sglang_cached_tokens_by_source_and_not_its_hit_rate_gauge() -> None:
    registry = CollectorRegistry()
    prompt = Counter("sglang:prompt_tokens", "prompt tokens", registry=registry)
    cached = Counter("sglang:cached_tokens", "cached tokens", ["cache_source"], registry=registry)
    rate = Gauge("sglang:cache_hit_rate", "hit rate", registry=registry)
    prompt.inc(10_000)
    cached.labels("device").inc(4_000)
    cached.labels("host").inc(1_000)
    rate.set(0.9)
    tokens = engine_tokens(generate_latest(registry).decode())
    assert (tokens.prefilled, tokens.cached) == (5000.0, 5000.0)


def test_an_engine_without_known_counters_and_the_sum_over_replicas() -> None:
    assert engine_tokens("# TYPE other_total counter\nother_total 5\n") == NONE
    total = NONE + engine_tokens(LLAMA_CPP) + engine_tokens(LLAMA_CPP)
    assert (total.prefilled, total.cached) == (2400.0, 1600.0)
    assert len(total.counters) == 2
