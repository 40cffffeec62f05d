"""Small hand-made inputs for the dashboard tests."""

import random
from typing import Any

XSS = "<script>alert(1)</script>"
#: A models file that prices model `m` alone (dollars per million tokens).
INPUT_USD, CACHED_USD = 3.00, 0.30
MODELS_FILE = f"""
[[model]]
match = "m"
input_usd_per_mtok = {INPUT_USD}
cached_usd_per_mtok = {CACHED_USD}
"""


def bucket(
    ts: str, hit: float, cacheable: float, requests: int = 10, **extra: Any
) -> dict[str, Any]:
    """One `/v1/metrics` bucket with consistent sums."""
    prompt = requests * 1000
    cached = int(prompt * hit)
    cacheable_tokens = int(prompt * cacheable)
    return {
        "ts": ts,
        "requests": requests,
        "prompt_tokens": prompt,
        "cached_tokens": cached,
        "hit_rate": cached / prompt,
        "fingerprinted_requests": requests,
        "fingerprinted_prompt_tokens": prompt,
        "cacheable_tokens": cacheable_tokens,
        "cacheable_fraction": cacheable_tokens / prompt,
        "capture_ratio": cached / cacheable_tokens if cacheable_tokens else None,
        "rewarms": {
            "total": 5,
            "below_minimum": 1,
            "concurrent": 1,
            "expiry": 1,
            "routing": 1,
            "eviction": 1,
            "unknown": 0,
        },
        "rewarm_tokens": 600,
        "rewarm_tokens_by_cause": {
            "below_minimum": 100,
            "concurrent": 100,
            "expiry": 100,
            "routing": 100,
            "eviction": 200,
            "unknown": 0,
        },
        "rewarm_share": 600 / prompt,
        "history_rewrites": 0,
        "session_requests": 0,
        "unique_prefix_ratio": 0.1,
        "hits": requests // 2,
        "misses": requests - requests // 2,
        "ttft_ms": {"hit": {"p50": 100.0, "p95": 200.0}, "miss": {"p50": 400.0, "p95": 900.0}},
        "replicas": 2,
        "cache_write_tokens": 0,
        "priced_requests": requests,
        # At $3 per million uncached tokens and $0.30 cached (contract section 4a).
        "spend_usd": ((prompt - cached) * 3.0 + cached * 0.3) / 1e6,
        "wasted_usd": 600 * 2.7 / 1e6,
        "wasted_usd_by_cause": {
            "below_minimum": 100 * 2.7 / 1e6,
            "concurrent": 100 * 2.7 / 1e6,
            "expiry": 100 * 2.7 / 1e6,
            "routing": 100 * 2.7 / 1e6,
            "eviction": 200 * 2.7 / 1e6,
            "unknown": 0.0,
        },
        **extra,
    }


def unpriced(b: dict[str, Any]) -> dict[str, Any]:
    """The bucket as a model without prices answers it: dollars null, not 0."""
    return {
        **b,
        "priced_requests": 0,
        "spend_usd": None,
        "wasted_usd": None,
        "wasted_usd_by_cause": dict.fromkeys(b["wasted_usd_by_cause"]),
    }


def records(
    n: int, start_s: float, span_s: float, *, service: str, model: str = "m", seed: int = 0
) -> list[dict[str, Any]]:
    """Usage records of one service: a shared 4-block start, a per-session part, a
    fresh tail; two replicas, TTFT, a deploy tag."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        session = rnd.randrange(40)
        blocks = [1, 2, 3, 4, 1000 + session, 2000 + session, 10_000 + i + seed * 100_000]
        cached = rnd.choice([0, 256, 768, 1024])
        out.append(
            {
                "request_id": f"{service}-{seed}-{i}",
                "ts": start_s + span_s * i / n,
                "service": service,
                "model": model,
                "prompt_tokens": len(blocks) * 256,
                "cached_tokens": cached,
                "ttft_ms": 120.0 if cached else 450.0,
                "replica": f"r{session % 2}",
                "deploy": "v1",
                "block_size": 256,
                "block_hashes": blocks,
            }
        )
    return out


#: The grouped traffic's range: four hours from a whole hour, the canary in the last.
T0 = 1_764_399_600
SPAN_S = 4 * 3600
CANARY_FROM = T0 + 3 * 3600
SCENARIOS = ("chat", "chat", "chat", "summary", "search")


def grouped(n: int, *, canary: bool, seed: int = 0) -> list[dict[str, Any]]:
    """Records of service `svc` (model m, priced) with a scenario and a tenant each;
    scenario `summary` loses its prefix halfway (nothing cached from then on); all on
    deploy v1, except (with `canary`) a tenth of the last hour's on v2, whose prompts
    lost their prefix too."""
    rnd = random.Random(seed)
    out = records(n, T0, SPAN_S, service="svc", seed=seed)
    for i, r in enumerate(out):
        r["scenario"] = SCENARIOS[i % len(SCENARIOS)]
        r["tenant"] = f"tenant-{i % 4}"
        if r["scenario"] == "summary" and r["ts"] >= T0 + SPAN_S / 2:
            r["cached_tokens"] = 0
        if canary and r["ts"] >= CANARY_FROM and rnd.random() < 0.1:
            r["deploy"] = "v2"
            r["cached_tokens"] = 0
    return out
