"""What the dashboard reads (`dashboards/` draws it): which services and models the
filters select, and per data request the numbers behind its panels: the time
series and headline sums, the models without prices, the events and regressions
marked on them, the tables, the capacity sample and its replay. Everything here
reads; the read routes catch the rollups up first (`service.services.freshness`).

Why a service: the page's panels read the same rollups as `/v1/metrics`, and must
agree with it. The time series come from the one series path
(`service.services.series`); the headline and the top prefixes sum rollup rows
split into the grains the rollups keep (`plan`, with the prefix rollups' grains
from the analytics pass), a decision of this layer, which hands the planned
segments to the queries (`service.repository.dashboard`). The page itself (figures,
filters, wording) knows nothing of tables or grains."""

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import polars as pl
from sqlalchemy.orm import Session

from service.analytics.capacity import capacity_curve
from service.analytics.definitions import REWARM_COLUMNS
from service.findings import FindingsResult
from service.models import ChangeEvent, Regression
from service.repository import dashboard as dashboard_repo
from service.repository import detection as detection_repo
from service.repository import series as series_repo
from service.repository.dashboard import RollupRows
from service.repository.series import Segment
from service.rfc3339 import us_to_rfc3339
from service.rollups import chart
from service.services.findings import findings
from service.services.rollup_writes import PREFIX_GRAINS_S
from service.services.series import SeriesAnswer, SeriesQuery, plan, series
from service.settings import Settings

DAY_S = 86_400
#: The sums the headline needs, for the range and the one before it.
TOTAL_COLUMNS = (
    "requests",
    "prompt_tokens",
    "cached_tokens",
    "fp_prompt_tokens",
    "fp_cached_tokens",
    "cacheable_tokens",
    "rewarm_tokens",
    *REWARM_COLUMNS,
    "priced_requests",
    "spend_usd",
    "wasted_usd",
)


# --- what the filters select --------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    """The services and models with data that the filters select, and the start of
    their newest minute bucket (None: no data)."""

    services: tuple[str, ...]
    models: tuple[str, ...]
    newest_us: int | None


def series_keys(session: Session) -> list[tuple[str, str]]:
    """Every (service, model) with data, sorted, for the filter menus (daily chart
    rows: one per (service, model) and day; every minute of data is in its day's row)."""
    return sorted(series_repo.scope_values(session, 0, "", "", DAY_S))


def selected(session: Session, service: str | None, model: str | None) -> Selection:
    """The pairs with data of the service and model (None: any)."""
    keys = [
        (s, m)
        for s, m in series_keys(session)
        if (not service or s == service) and (not model or m == model)
    ]
    services = tuple(sorted({s for s, _ in keys}))
    models = tuple(sorted({m for _, m in keys}))
    return Selection(services, models, newest_bucket(session, services, model or None))


def only_service(services: Sequence[str]) -> str | None:
    """The service of the chart rows to read for `services`, the selected service or
    every service with data: one service means that service (and when only one has
    data, both readings give the same rows' sums), several mean all."""
    return services[0] if len(services) == 1 else None


def newest_bucket(session: Session, services: Sequence[str], model: str | None) -> int | None:
    """The start of the newest minute bucket with data of the services (the selected
    one or all, see `only_service`) and model: one index seek."""
    if not services:
        return None
    key = chart.scope_key(only_service(services), model)
    newest = series_repo.newest_minute(session, key)
    return int(newest) if newest is not None else None


# --- the rows a panel reads -----------------------------------------------------------


@dataclass(frozen=True)
class Window:
    """What the panels show: the selected service and model (None: all) over
    [from_us, to_us) in `bucket_s` buckets, the headline compared with `previous`."""

    service: str | None
    model: str | None
    from_us: int
    to_us: int
    bucket_s: int
    previous: tuple[int, int]
    #: Only this group's records in the headline and time series (None: all).
    group: chart.Group | None = None


@dataclass(frozen=True)
class Scope:
    """The rollup rows of the selection over [from_us, to_us), of one group's
    records when `group` is set (the chart rows alone keep groups)."""

    services: tuple[str, ...]
    models: tuple[str, ...]
    model: str | None
    from_us: int
    to_us: int
    group: chart.Group | None = None

    @property
    def rows(self) -> RollupRows:
        return RollupRows(self.services, self.models, self.model)

    def chart_key(self) -> chart.Scope:
        """The chart rollups answering this scope."""
        return chart.scope_key(only_service(self.services), self.model, self.group)

    def chart_segments(self) -> list[Segment]:
        """The range in the coarsest chart rows (days, hours, 5 and 1 minutes)."""
        return plan(self.from_us, self.to_us, DAY_S)

    def prefix_segments(self) -> list[Segment]:
        """The range in `prefix_rollups` rows: daily rows for the whole days of the
        range, hourly rows for the whole hours at its ends, minute rows for its
        ragged edges (a month reads 30 rows per prefix and replica)."""
        return plan(self.from_us, self.to_us, DAY_S, PREFIX_GRAINS_S)


def scope_of(
    selection: Selection,
    model: str | None,
    from_us: int,
    to_us: int,
    group: chart.Group | None = None,
) -> Scope:
    return Scope(selection.services, selection.models, model, from_us, to_us, group)


def range_totals(session: Session, scope: Scope) -> dict[str, float]:
    """TOTAL_COLUMNS summed over the range by the database (no rows come back)."""
    if not scope.services:
        return dict.fromkeys(TOTAL_COLUMNS, 0)
    return series_repo.sum_series_rows(
        session, scope.chart_key(), scope.chart_segments(), TOTAL_COLUMNS
    )


def top_prefixes(session: Session, scope: Scope, limit: int) -> list[dict[str, Any]]:
    """Leading prefixes (first block key) by prompt tokens, per service and model."""
    if not scope.services:
        return []
    return dashboard_repo.top_prefixes(session, scope.rows, scope.prefix_segments(), limit)


@dataclass(frozen=True)
class Prices:
    """The models in range without prices (no request priced) and those with only
    some requests priced, sorted: what the dollar figures leave out."""

    unpriced: tuple[str, ...]
    partly_priced: tuple[str, ...]


def price_coverage(session: Session, scope: Scope) -> Prices:
    """Which models of the range lack prices, from the chart rows' request and
    priced-request sums (the rows of the selected service, or of all)."""
    if not scope.services:
        return Prices((), ())
    counts = series_repo.sums_by_model(
        session,
        only_service(scope.services),
        scope.chart_segments(),
        ("requests", "priced_requests"),
        scope.model,
    )
    served = {m: c for m, c in counts.items() if c["requests"]}
    return Prices(
        tuple(sorted(m for m, c in served.items() if not c["priced_requests"])),
        tuple(sorted(m for m, c in served.items() if 0 < c["priced_requests"] < c["requests"])),
    )


def busiest_model(session: Session, scope: Scope) -> str | None:
    """The model with the most prompt tokens in the range (the selected one, if it
    has any); ties go to the first name."""
    if not scope.services:
        return None
    sums = series_repo.sums_by_model(
        session, only_service(scope.services), scope.chart_segments(), ("prompt_tokens",)
    )
    tokens = {m: s["prompt_tokens"] for m, s in sums.items()}
    if scope.model is not None:
        tokens = {m: n for m, n in tokens.items() if m == scope.model}
    if not tokens:
        return None
    return min(tokens, key=lambda m: (-tokens[m], m))


def regressions_in_range(
    session: Session, service: str | None, model: str | None, from_us: int, to_us: int
) -> list[Regression]:
    """Regressions whose span (change to resolution, or still open) meets the range,
    newest change first."""
    return list(detection_repo.regressions_overlapping(session, service, model, from_us, to_us))


def config_events_before(
    session: Session, service: str | None, model: str | None, to_us: int, limit: int
) -> Sequence[ChangeEvent]:
    """The latest `config` events up to the end of a range, newest first (those of
    no model count for every model)."""
    return dashboard_repo.config_events_before(session, service, model, to_us, limit)


# --- per data request -----------------------------------------------------------------


@dataclass(frozen=True)
class SeriesReading:
    """What the series request draws: the buckets (None: no service has data for
    the filters), the headline sums of the range and of the one before, the models
    of the range without prices, and the events and regressions to mark."""

    answer: SeriesAnswer | None
    current: dict[str, float]
    previous: dict[str, float]
    prices: Prices
    events: Sequence[ChangeEvent]
    regressions: list[Regression]


def read_series(
    session: Session, selection: Selection, window: Window, max_events: int
) -> SeriesReading:
    """The series request's reads: the buckets from the one series path (as
    `/v1/metrics` answers them, with the view's group filter), the headline sums (of
    the group too), and at most `max_events` events. Prices are told for the whole
    scope: the rows by model are not kept per group."""
    answer = None
    if selection.services:
        query = SeriesQuery(
            window.service,
            window.model,
            window.from_us,
            window.to_us,
            window.bucket_s,
            group=window.group,
        )
        answer = series(session, query)
    current = scope_of(selection, window.model, window.from_us, window.to_us, window.group)
    previous = scope_of(selection, window.model, *window.previous, group=window.group)
    return SeriesReading(
        answer,
        range_totals(session, current),
        range_totals(session, previous),
        price_coverage(session, replace(current, group=None)),
        dashboard_repo.events_in_range(
            session, window.service, window.model, window.from_us, window.to_us, max_events
        ),
        regressions_in_range(session, window.service, window.model, window.from_us, window.to_us),
    )


@dataclass(frozen=True)
class TablesReading:
    """What the tables request shows: the regressions of the range (newest first),
    per regression the `kind: state` of each Slack alert it owes, and the top
    prefixes by prompt tokens."""

    regressions: list[Regression]
    alert_states: dict[int, list[str]]
    prefixes: list[dict[str, Any]]


def read_tables(
    session: Session, selection: Selection, window: Window, top_count: int
) -> TablesReading:
    regressions = regressions_in_range(
        session, window.service, window.model, window.from_us, window.to_us
    )
    states = dashboard_repo.alert_states(session, [r.id for r in regressions])
    prefixes = top_prefixes(
        session, scope_of(selection, window.model, window.from_us, window.to_us), top_count
    )
    return TablesReading(regressions, states, prefixes)


def read_findings(
    session: Session, settings: Settings, selection: Selection, window: Window
) -> FindingsResult:
    """The findings panel's read: the findings of the view's service and model over
    its range, as `GET /v1/findings` answers them (worst first); nothing selected
    reads nothing."""
    if not selection.services:
        return FindingsResult([], [], 0.0)
    return findings(
        session,
        settings,
        service=window.service,
        model=window.model,
        from_us=window.from_us,
        to_us=window.to_us,
    )


def capacity_model(session: Session, selection: Selection, window: Window) -> str | None:
    """The model the capacity figure replays: the selected one, else the busiest."""
    return window.model or busiest_model(
        session, scope_of(selection, window.model, window.from_us, window.to_us)
    )


def newest_usage_id(session: Session) -> int:
    """The newest record id, which keys a capacity replay (see the repository's)."""
    return dashboard_repo.newest_usage_id(session)


def capacity_sample(
    session: Session, model: str, from_us: int, to_us: int, limit: int
) -> pl.DataFrame:
    """The latest `limit` requests with block hashes of the model in the range, in
    order: a bounded replay, whatever the range holds."""
    return dashboard_repo.latest_block_frame(session, model, from_us, to_us, limit)


def replay_capacity(frame: pl.DataFrame, sizes: Sequence[int], model: str) -> dict[str, Any]:
    """The capacity curve of the sample at each of `sizes` (tokens), with how many
    requests it replayed and from when. Pure computation: it runs on the replay
    thread, after the request's session is gone."""
    result = capacity_curve(frame, sizes)
    return {
        "model": model,
        "requests": frame.height,
        "from": us_to_rfc3339(int(frame["ts_us"][0])) if frame.height else None,
        "block_size": result.block_size,
        "ceiling": result.ceiling,
        "points": [{"tokens": p.tokens, "hit_rate": p.hit_rate} for p in result.points],
    }


# --- cache keys -----------------------------------------------------------------------


def data_version(session: Session) -> tuple[int, int, int, int]:
    """Changes whenever what the dashboard shows may change (a record, an event, a
    regression found or updated): cached answers are keyed by it."""
    return dashboard_repo.data_version(session)


def alerts_version(session: Session) -> tuple[int, int]:
    """Changes whenever an alert is queued or its delivery state moves."""
    return dashboard_repo.alerts_version(session)
