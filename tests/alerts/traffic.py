"""Small synthetic traffic with a known hit-rate drop: a stable prefix, then after
deploy v42 a unique start per request (prefix_instability), optionally fixed later."""

from typing import Any

START_S = 1_795_000_000  # 2026-11-18T11:06:40Z


def drop_records(
    service: str,
    model: str,
    *,
    start_s: int = START_S,
    hours_before: float = 3,
    hours_after: float = 3,
    recover: bool = False,
    step_s: int = 20,
) -> list[dict[str, Any]]:
    n_before = int(hours_before * 3600 / step_s)
    n_after = int(hours_after * 3600 / step_s)
    total = n_before + n_after + (n_before if recover else 0)
    records = []
    for i in range(total):
        bad = n_before <= i < n_before + n_after
        records.append(
            {
                "request_id": f"{service}-{model}-{start_s}-{i}",
                "ts": start_s + i * step_s,
                "service": service,
                "model": model,
                "prompt_tokens": 2000,
                "cached_tokens": 200 if bad else 1600,
                "deploy": "v42" if i >= n_before else "v41",
                "prefix_hash": f"p{i}" if bad else "p",
                "prefix_tokens": 1600,
            }
        )
    return records
