import re
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, HTTPException, Query
from fastapi.responses import Response

from service.api.deps import ReadAuth, ReadSessionDep, SettingsDep
from service.api.freshness import CaughtUp
from service.api.params import (
    DeployParam,
    ModelParam,
    ScenarioParam,
    ServiceParam,
    TenantParam,
    TimeParam,
    ToParam,
    declared_pattern,
    group_filter,
    parse_time_param,
)
from service.api.patterns import alternation, anchored, integer_range
from service.api.schemas import READ_ERRORS, CapacityOut, Detail
from service.services import capacity
from service.services.metrics import DAY_S, MINUTE_S, MetricsQuery, TooManyBuckets, metrics

router = APIRouter(tags=["analytics"], responses=READ_ERRORS)

BUCKET_DIGITS = 6
_DURATION = re.compile(rf"^(\d{{1,{BUCKET_DIGITS}}})\s*(s|m|min|h|d)?$")
_UNIT_S = {None: 1, "s": 1, "m": 60, "min": 60, "h": 3600, "d": 86_400}
DEFAULT_SIZES = [16384 * 4**i for i in range(6)]  # 16Ki .. 16Mi tokens
MAX_SIZES = 64
MAX_SIZE_TOKENS = 2**50


def _bucket_pattern() -> str:
    """Every `bucket` parse_bucket accepts, for the schema: per unit, the counts
    giving a whole number of minutes from one minute to a day, leading zeros
    allowed up to BUCKET_DIGITS digits (the Query pattern leaves no space or
    capital for its strip() and lower() to undo)."""
    parts = []
    for unit, unit_s in _UNIT_S.items():
        counts = [
            n
            for n in range(1, DAY_S // unit_s + 1)
            if n * unit_s >= MINUTE_S and n * unit_s % MINUTE_S == 0
        ]
        by_length: dict[int, list[str]] = {}
        for n in counts:
            by_length.setdefault(len(str(n)), []).append(str(n))
        numbers = "|".join(
            f"0{{0,{BUCKET_DIGITS - length}}}{alternation(words)}"
            for length, words in by_length.items()
        )
        parts.append(f"(?:{numbers}){unit or ''}")
    return anchored("|" + "|".join(parts))


def _sizes_pattern() -> str:
    """What get_capacity accepts in `sizes`: comma-separated token counts (int()
    reads them: spaces around, leading zeros), empty items skipped, 1 to MAX_SIZES
    of them, each 1 to MAX_SIZE_TOKENS; or empty (the default sizes)."""
    empty = " *"
    count = f" *0*{integer_range(1, MAX_SIZE_TOKENS)} *"
    items = f"(?:{empty},)*{count}(?:,{empty})*(?:,{count}(?:,{empty})*){{0,{MAX_SIZES - 1}}}"
    return anchored(f"|{items}")


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


def parse_sizes(value: str | None) -> list[int]:
    """`sizes`: comma-separated token counts (empty items skipped), 1 to MAX_SIZES of
    them, each 1 to MAX_SIZE_TOKENS; none: DEFAULT_SIZES."""
    if not value:
        return DEFAULT_SIZES
    try:
        sizes = [int(s) for s in value.split(",") if s.strip()]
    except ValueError:
        raise HTTPException(422, "`sizes`: comma-separated token counts") from None
    if not sizes or len(sizes) > MAX_SIZES or any(not 0 < s <= MAX_SIZE_TOKENS for s in sizes):
        raise HTTPException(422, f"`sizes`: 1 to {MAX_SIZES} positive token counts")
    return sizes


@router.get(
    "/v1/metrics",
    dependencies=[ReadAuth, CaughtUp],
    responses={
        400: {"model": Detail, "description": "More buckets than MAX_BUCKETS"},
        404: {"model": Detail, "description": "Two group filters at once (none is kept)"},
    },
)
def get_metrics(
    session: ReadSessionDep,
    settings: SettingsDep,
    service: ServiceParam = None,
    model: ModelParam = None,
    from_: TimeParam = None,
    to: ToParam = None,
    bucket: Annotated[
        str | None,
        Query(max_length=20, pattern=r"^[0-9a-z]*$"),
        declared_pattern(
            _bucket_pattern(),
            "Seconds, or a count of s, m (min), h or d: a whole number of minutes from "
            "1 minute to 1 day (e.g. 300, 5m, 1h, 1d); empty: the detection bucket",
        ),
    ] = None,
    scenario: ScenarioParam = None,
    tenant: TenantParam = None,
    deploy: DeployParam = None,
) -> Response:
    """Hit rate, cacheable fraction, rewarms and TTFT per bucket and in total,
    including every record committed before the query. 400 when the range holds
    data in more than `MAX_BUCKETS` buckets (docs/metrics.md). `scenario`, `tenant`
    or `deploy` (one at a time, 404 for two): only that group's records (docs/groups.md)."""
    group = group_filter(scenario, tenant, deploy)
    query = MetricsQuery(
        service=service or None,
        model=model or None,
        from_us=parse_time_param("from", from_),
        to_us=parse_time_param("to", to),
        bucket_s=parse_bucket(bucket, default_s=max(MINUTE_S, settings.detect_bucket_s)),
        group=group,
    )
    try:
        answer = metrics(session, query)
    except TooManyBuckets as exc:
        raise HTTPException(400, str(exc)) from None
    # Serialized here: thousands of buckets through the generic encoder cost more
    # than computing them.
    return Response(orjson.dumps(answer), media_type="application/json")


@router.get(
    "/v1/capacity",
    dependencies=[ReadAuth],
    response_model=CapacityOut,
    response_model_exclude_unset=True,
)
def get_capacity(
    session: ReadSessionDep,
    settings: SettingsDep,
    model: ModelParam = None,
    from_: TimeParam = None,
    to: ToParam = None,
    sizes: Annotated[
        str | None,
        Query(max_length=2000, pattern=r"^[0-9,. a-zA-Z]*$"),
        declared_pattern(
            _sizes_pattern(),
            f"Comma-separated cache sizes in tokens, 1 to {MAX_SIZES} of them; "
            "empty: 16Ki to 16Mi by fours",
        ),
    ] = None,
) -> dict[str, Any]:
    """Token hit rate of one LRU cache of each size, replaying the model's
    fingerprinted requests in order; `ceiling` is the unbounded cache."""
    size_list = parse_sizes(sizes)
    try:
        return capacity.capacity(
            session,
            model=model or None,
            from_us=parse_time_param("from", from_),
            to_us=parse_time_param("to", to),
            sizes=size_list,
            sample_rate=settings.clickhouse_capacity_sample_rate,
        )
    except capacity.AmbiguousModel as exc:
        raise HTTPException(422, str(exc)) from None
