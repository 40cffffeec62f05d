"""GET /v1/capacity: the LRU capacity curve of one model's fingerprinted traffic."""

from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from service import repository
from service.analytics.capacity import capacity_curve


class AmbiguousModel(ValueError):
    """No model was named and the data holds several."""


def capacity(
    session: Session,
    *,
    model: str | None,
    from_us: int | None,
    to_us: int | None,
    sizes: Sequence[int],
) -> dict[str, Any]:
    if model is None:
        models = repository.distinct_models(session, limit=2)
        if len(models) > 1:
            raise AmbiguousModel("`model` is required: the records hold several models")
        model = models[0] if models else None
    frame = repository.load_block_frame(session, model=model, from_us=from_us, to_us=to_us)
    result = capacity_curve(frame, sizes)
    return {
        "model": model,
        "requests": frame.height,
        "block_size": result.block_size,
        "ceiling": result.ceiling,
        "points": [{"tokens": p.tokens, "hit_rate": p.hit_rate} for p in result.points],
    }
