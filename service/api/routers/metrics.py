import re
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import Response

from service.api.deps import ReadAuth, SessionDep, SettingsDep
from service.api.freshness import CaughtUp
from service.api.params import ModelParam, ServiceParam, TimeParam, ToParam, parse_time_param
from service.api.schemas import READ_ERRORS, CapacityOut, ErrorAnswer
from service.services import capacity
from service.services.metrics import DAY_S, MINUTE_S, MetricsQuery, TooManyBuckets, metrics

router = APIRouter(tags=["analytics"], responses=READ_ERRORS)

_DURATION = re.compile(r"^(\d{1,6})\s*(s|m|min|h|d)?$")
_UNIT_S = {None: 1, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86_400}
DEFAULT_SIZES = [16384 * 4**i for i in range(6)]  # 16Ki .. 16Mi tokens


def parse_bucket(value: str | None, default_s: int) -> int:
    """`bucket` as seconds (`300`) or with a unit (`5m`, `1h`, `1d`): a whole number of
    minutes from one minute to one day, because rollups are kept per minute."""
    if value is None or value == "":
        return default_s
    match = _DURATION.match(value.strip().lower())
    if match is None:
        raise HTTPException(422, "`bucket`: seconds, or a number with s, m, h or d (e.g. 5m)")
    seconds = int(match.group(1)) * _UNIT_S[match.group(2)]
    if not MINUTE_S <= seconds <= DAY_S or seconds % MINUTE_S:
        raise HTTPException(422, "`bucket`: a whole number of minutes from 1 minute to 1 day")
    return seconds


@router.get(
    "/v1/metrics",
    dependencies=[ReadAuth, CaughtUp],
    responses={400: {"model": ErrorAnswer, "description": "More buckets than MAX_BUCKETS"}},
)
def get_metrics(
    session: SessionDep,
    settings: SettingsDep,
    service: ServiceParam = None,
    model: ModelParam = None,
    from_: TimeParam = None,
    to: ToParam = None,
    bucket: Annotated[str | None, Query(max_length=20, pattern=r"^[0-9a-z]*$")] = None,
) -> Response:
    """Hit rate, cacheable fraction, rewarms and TTFT per bucket and in total,
    including every record committed before the query. 400 when the range holds
    data in more than `MAX_BUCKETS` buckets (docs/metrics.md)."""
    query = MetricsQuery(
        service=service or None,
        model=model or None,
        from_us=parse_time_param("from", from_),
        to_us=parse_time_param("to", to),
        bucket_s=parse_bucket(bucket, default_s=max(MINUTE_S, settings.detect_bucket_s)),
    )
    try:
        answer = metrics(session, query)
    except TooManyBuckets as exc:
        raise HTTPException(400, str(exc)) from None
    # Serialized here: thousands of buckets through the generic encoder cost more
    # than computing them.
    return Response(orjson.dumps(answer), media_type="application/json")


@router.get("/v1/capacity", dependencies=[ReadAuth], response_model=CapacityOut)
def get_capacity(
    session: SessionDep,
    model: ModelParam = None,
    from_: TimeParam = None,
    to: ToParam = None,
    sizes: Annotated[str | None, Query(max_length=2000, pattern=r"^[0-9,. a-zA-Z]*$")] = None,
) -> dict[str, Any]:
    """Token hit rate of one LRU cache of each size, replaying the model's
    fingerprinted requests in order; `ceiling` is the unbounded cache."""
    try:
        size_list = [int(s) for s in sizes.split(",") if s.strip()] if sizes else DEFAULT_SIZES
    except ValueError:
        raise HTTPException(422, "`sizes`: comma-separated token counts") from None
    if not size_list or len(size_list) > 64 or any(s <= 0 or s > 2**50 for s in size_list):
        raise HTTPException(422, "`sizes`: 1 to 64 positive token counts")
    try:
        return capacity.capacity(
            session,
            model=model or None,
            from_us=parse_time_param("from", from_),
            to_us=parse_time_param("to", to),
            sizes=size_list,
        )
    except capacity.AmbiguousModel as exc:
        raise HTTPException(422, str(exc)) from None
