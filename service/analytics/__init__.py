"""The analytics core: contract section 4 as pure functions over Polars frames.

* `compute_request_metrics`: per-request values (seen blocks, cacheable and
  rewarm tokens, rewarm cause, history rewrite, hit), incremental via `ReuseState`;
* `capacity_curve`: the LRU capacity curve, every size from one pass;
* `rollup` and the metric functions: sums per group and the ratios built on them.

No I/O here: the service layer loads records, persists results and state.
"""

from service.analytics.capacity import CapacityPoint, CapacityResult, capacity_curve
from service.analytics.requests import (
    CAUSES,
    INPUT_SCHEMA,
    RESULT_SCHEMA,
    compute_request_metrics,
)
from service.analytics.rollups import (
    SUM_COLUMNS,
    cacheable_fraction,
    capture_ratio,
    history_rewrite_share,
    hit_rate,
    is_hit,
    join_results,
    metrics,
    rewarm_share,
    rollup,
    unique_prefix_ratio,
)
from service.analytics.state import (
    LateRecordsError,
    RecomputePlan,
    ReuseState,
    plan_from,
    plan_recompute,
)

__all__ = [
    "CAUSES",
    "INPUT_SCHEMA",
    "RESULT_SCHEMA",
    "SUM_COLUMNS",
    "CapacityPoint",
    "CapacityResult",
    "LateRecordsError",
    "RecomputePlan",
    "ReuseState",
    "cacheable_fraction",
    "capacity_curve",
    "capture_ratio",
    "compute_request_metrics",
    "history_rewrite_share",
    "hit_rate",
    "is_hit",
    "join_results",
    "metrics",
    "plan_from",
    "plan_recompute",
    "rewarm_share",
    "rollup",
    "unique_prefix_ratio",
]
