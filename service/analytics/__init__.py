"""The analytics core: contract section 4 as pure functions over Polars frames.

* `compute_request_metrics`: per-request values (seen blocks, cacheable and
  rewarm tokens, rewarm cause, history rewrite, hit), incremental via `ReuseState`;
* `capacity_curve`: the LRU capacity curve, every size from one pass;
* `definitions`: the causes, the rollup sums and the ratios of contract section 4.

No I/O here: the service layer loads records, persists results and state.
"""

from service.analytics.capacity import CapacityPoint, CapacityResult, capacity_curve
from service.analytics.requests import (
    INPUT_SCHEMA,
    RESULT_SCHEMA,
    compute_request_metrics,
)
from service.analytics.state import (
    LateRecordsError,
    RecomputePlan,
    ReuseState,
    plan_from,
    plan_recompute,
)

__all__ = [
    "INPUT_SCHEMA",
    "RESULT_SCHEMA",
    "CapacityPoint",
    "CapacityResult",
    "LateRecordsError",
    "RecomputePlan",
    "ReuseState",
    "capacity_curve",
    "compute_request_metrics",
    "plan_from",
    "plan_recompute",
]
