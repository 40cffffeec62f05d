"""What each data request of the page answers: the time-series figures with the
headline (of the view's group, when one is selected), the capacity figure, the two
tables and the findings (the groups panels: `dashboards.groups`). The numbers come
from the dashboard's service (`service.services.dashboard`: all read the rollups,
except the capacity replay which reads a bounded sample of the records); this
module draws and words them."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go
from sqlalchemy.orm import Session

from dashboards import costs, figures
from dashboards.cache import ReplayCache
from dashboards.capacity_figure import Budget, capacity_figure
from dashboards.filters import RawFilters, View, format_duration, resolve
from dashboards.markers import Markers, markers_from
from service.alerts.money import usd_per_day
from service.alerts.wording import duration, pct
from service.analytics.budget import parse_budget
from service.analytics.capacity import REPLAY_MAX_REQUESTS
from service.analytics.definitions import REWARM_COLUMNS, dollars, ratios
from service.findings import MISSING_DATA, Finding, FindingsResult
from service.rfc3339 import us_to_rfc3339
from service.rollups.chart import Group
from service.services import dashboard
from service.services.events import event_to_json
from service.services.regressions import regression_to_json
from service.settings import Settings

CAPACITY_SIZES = tuple(16384 * 4**i for i in range(6))  # 16Ki .. 16Mi tokens
#: The capacity replay reads at most this many of the newest requests in the range.
CAPACITY_MAX_REQUESTS = REPLAY_MAX_REQUESTS
CAPACITY_WAIT_S = 0.2
MAX_EVENTS = 500
TOP_PREFIXES = 20
#: Findings the panel lists, the worst; the rest are counted (`GET /v1/findings`
#: pages through all of them).
MAX_FINDING_ROWS = 50

FINGERPRINT_HINT = (
    "Send `block_hashes` (with `block_size`) or `prefix_hash` (with `prefix_tokens`) "
    "in each usage record to see what could have been cached."
)
#: docs/fingerprint.md (how to send `segments`, `block_hashes`, `prefix_hash`), as the
#: dashboard serves it.
FINGERPRINT_DOCS = {"title": "docs/fingerprint.md", "href": "/docs/fingerprint.md"}
#: docs/findings.md (what each kind of finding means and how it is measured).
FINDINGS_DOCS = {"title": "docs/findings.md", "href": "/docs/findings.md"}
#: The missing data (codes of MISSING_DATA) whose fields the fingerprint docs explain.
DOCUMENTED_MISSING = {"segments": FINGERPRINT_DOCS, "fingerprints": FINGERPRINT_DOCS}
NO_RECORDS = "No usage records for these filters in this range."


@dataclass(frozen=True)
class Context:
    """A resolved view and what its filters select."""

    view: View
    selection: dashboard.Selection

    @property
    def window(self) -> dashboard.Window:
        """The view as the service reads it."""
        view = self.view
        return dashboard.Window(
            view.service,
            view.model,
            view.from_us,
            view.to_us,
            view.bucket_s,
            view.previous,
            view.group,
        )


def context(session: Session, raw: RawFilters, now_us: int) -> Context:
    """The view of the filters, a range without `to` ending at the newest data of
    what they select. Raises `FilterError` for parameters that cannot be understood."""
    selection = dashboard.selected(session, raw.service or None, raw.model or None)
    return Context(resolve(raw, selection.newest_us, now_us), selection)


def headline_values(sums: dict[str, float]) -> dict[str, Any]:
    """The headline numbers from range sums, with the contract's definitions
    (dollars None without prices)."""
    return {
        "requests": sums["requests"],
        **ratios(sums, ("hit_rate", "cacheable_fraction", "capture_ratio")),
        "rewarms": sum(sums[c] for c in REWARM_COLUMNS),
        "spend_usd": dollars(sums["spend_usd"], int(sums["priced_requests"])),
        "wasted_usd": dollars(sums["wasted_usd"], int(sums["priced_requests"])),
    }


def view_json(ctx: Context) -> dict[str, Any]:
    view, newest = ctx.view, ctx.selection.newest_us
    previous_from, previous_to = view.previous
    return {
        "service": view.service,
        "model": view.model,
        "from": us_to_rfc3339(view.from_us),
        "to": us_to_rfc3339(view.to_us),
        "previous_from": us_to_rfc3339(previous_from),
        "previous_to": us_to_rfc3339(previous_to),
        "bucket": format_duration(view.bucket_s),
        "bucket_raised_from": (
            format_duration(view.bucket_raised_from_s) if view.bucket_raised_from_s else None
        ),
        "newest": us_to_rfc3339(newest) if newest is not None else None,
        "group": {"by": view.group.by, "value": view.group.value} if view.group else None,
        "groups_by": view.groups_by,
    }


def no_records_note(group: Group | None) -> str:
    """What a panel says without records: of the group, when one is selected (whose
    finished hours keep it only while it is among the busiest values of its field)."""
    if group is None:
        return NO_RECORDS
    return (
        f"No usage records of {group.by} `{group.value}` for these filters in this range "
        "(a finished hour keeps only the busiest values of each field: docs/dashboard.md)."
    )


def series_notes(
    buckets: Sequence[dict[str, Any]], prices: dashboard.Prices, group: Group | None = None
) -> dict[str, str | None]:
    """Per panel, what is missing and what to send to get it (None: nothing)."""
    if not any(b["requests"] for b in buckets):
        return dict.fromkeys(
            ("hit_rate", "rewarms", "ttft", "replicas", "cost"), no_records_note(group)
        )
    fingerprinted = any(b["fingerprinted_requests"] for b in buckets)
    has_ttft = any(b["ttft_ms"][o]["p50"] is not None for b in buckets for o in ("hit", "miss"))
    total = sum(b["rewarms"]["total"] for b in buckets)
    unknown = sum(b["rewarms"]["unknown"] for b in buckets)
    rewarm_note = None
    if not fingerprinted:
        rewarm_note = "Rewarms need fingerprints. " + FINGERPRINT_HINT
    elif total and unknown == total:
        rewarm_note = "Send `replica` in each record to tell routing from eviction."
    elif not total:
        rewarm_note = "No rewarms in this range: every reusable prefix was served from cache."
    return {
        "hit_rate": None
        if fingerprinted
        else "The ceiling needs fingerprints. " + FINGERPRINT_HINT,
        "rewarms": rewarm_note,
        "ttft": None if has_ttft else "Send `ttft_ms` in each record to compare hits and misses.",
        "replicas": (
            None
            if any(b["replicas"] for b in buckets)
            else "Send `replica` (the pod or endpoint that served the request) to see "
            "replicas serving."
        ),
        "cost": costs.prices_note(prices),
    }


def markers(reading: dashboard.SeriesReading, view: View) -> Markers:
    return markers_from(
        [event_to_json(e) for e in reading.events],
        [regression_to_json(r) for r in reading.regressions],
        us_to_rfc3339(view.from_us),
        us_to_rfc3339(view.to_us),
    )


def series_payload(session: Session, ctx: Context) -> dict[str, Any]:
    """Headline and the five time-series figures."""
    view = ctx.view
    reading = dashboard.read_series(session, ctx.selection, ctx.window, MAX_EVENTS)
    read = reading.answer
    buckets = read.buckets if read is not None else []
    grain = read.grains_s[0] if read is not None and read.grains_s else 60
    answer = {"bucket_s": view.bucket_s, "buckets": buckets}
    current = headline_values(reading.current)
    previous = headline_values(reading.previous)
    marks = markers(reading, view)
    # Without a priced bucket the cost panel is its note alone, not an empty chart.
    priced = any(b.get("spend_usd") is not None for b in buckets)
    built: dict[str, go.Figure | None] = {
        "hit_rate": figures.hit_rate_figure(answer, marks),
        "rewarms": figures.rewarms_figure(answer, marks),
        "ttft": figures.ttft_figure(answer, marks),
        "replicas": figures.replicas_figure(answer, marks),
        "cost": figures.cost_figure(answer, marks) if priced else None,
    }
    return {
        "view": view_json(ctx),
        "grain_s": grain,
        "points": len(buckets),
        "headline": {
            "current": current,
            "previous": previous,
            "wasted": costs.wasted_card(current, previous),
        },
        "figures": {
            name: figure.to_plotly_json() if figure is not None else None
            for name, figure in built.items()
        },
        "notes": series_notes(buckets, reading.prices, view.group),
        "events": len(marks.events),
        "regressions": len(marks.spans),
    }


def current_budget(session: Session, view: View, model: str) -> Budget | None:
    """The budget of the latest `config` event (up to the range's end) that tells one."""
    for event in dashboard.config_events_before(session, view.service, model, view.to_us, 200):
        tokens = parse_budget(event.description)
        if tokens is not None:
            return Budget(tokens, us_to_rfc3339(event.ts_us), event.description or "")
    return None


def capacity_payload(
    session: Session,
    ctx: Context,
    replays: ReplayCache,
    wait_s: float = CAPACITY_WAIT_S,
    sample: int | None = None,
) -> dict[str, Any]:
    """The capacity figure, or `pending` while its replay runs. A replay is keyed by
    the newest record id it saw, which a pending answer gives as `sample`: the page
    asks again for that sample. Keyed by the newest id at each ask, a page on a
    service that stores a batch between two asks would start a new replay each time
    and never draw."""
    view = ctx.view
    model = dashboard.capacity_model(session, ctx.selection, ctx.window)
    if model is None:
        return {"pending": False, "figure": None, "note": "No usage records in this range."}
    budget = current_budget(session, view, model)
    sizes = tuple(sorted({*CAPACITY_SIZES, *([budget.tokens] if budget else [])}))
    newest_id = dashboard.newest_usage_id(session) if sample is None else sample
    key = ("capacity", model, view.from_us, view.to_us, sizes, newest_id)
    result = replays.cached(key)
    if result is None:
        if not replays.running(key):
            frame = dashboard.capacity_sample(
                session, model, view.from_us, view.to_us, CAPACITY_MAX_REQUESTS
            )
            replays.submit(key, lambda: dashboard.replay_capacity(frame, sizes, model))
        result = replays.wait(key, wait_s)
    if result is None:
        return {"pending": True, "model": model, "sample": newest_id}
    note = None
    if not result["requests"]:
        note = "The capacity curve replays requests with `block_hashes`. " + FINGERPRINT_HINT
    elif budget is None:
        note = (
            "Post a `config` event telling the KV budget (e.g. `KV cache budget 4194304 "
            "tokens`) to see where you stand on the curve."
        )
    return {
        "pending": False,
        "model": model,
        "requests": result["requests"],
        "sample_from": result["from"],
        "sampled": result["requests"] >= CAPACITY_MAX_REQUESTS,
        "budget": (
            {"tokens": budget.tokens, "ts": budget.ts, "description": budget.description}
            if budget
            else None
        ),
        "figure": (
            capacity_figure(result, budget).to_plotly_json() if result["requests"] else None
        ),
        "note": note,
    }


def _attribution_text(attributed: dict[str, Any] | None) -> str:
    if not attributed:
        return "no event within reach"
    kind = attributed.get("kind")
    what = {
        "deploy": f"deploy {attributed.get('deploy')}",
        "replicas": f"replicas -> {attributed.get('replicas')}",
    }.get(str(kind), str(kind))
    lag = attributed.get("lag_s")
    lag_text = f", change {lag:+.0f} s after it" if isinstance(lag, int | float) else ""
    return f"{what} at {attributed.get('ts')} ({attributed.get('source')}{lag_text})"


def regression_row(data: dict[str, Any], alert_state: str) -> dict[str, Any]:
    """One row of the regressions table from a regression's contract JSON."""
    before, after = data["before"] or {}, data["after"] or {}
    return {
        "id": data["id"],
        "service": data["service"],
        "model": data["model"],
        "change_ts": data["change_ts"],
        "status": data["status"],
        "resolved_at": data["resolved_at"],
        "hit_rate_before": before.get("hit_rate"),
        "hit_rate_after": after.get("hit_rate"),
        "cacheable_before": before.get("cacheable_fraction"),
        "cacheable_after": after.get("cacheable_fraction"),
        "cost": costs.cost_cell(data),
        "attribution": _attribution_text(data["attributed_to"]),
        "cause": data["cause"],
        "evidence": [str(line) for line in data["evidence"] or []],
        "alert": alert_state,
        # A group's regression (contract section 5): {"by", "value"}; null: the service.
        "group": data.get("group"),
    }


def alert_text(states: Sequence[str]) -> str:
    """A regression's Slack alerts in one cell: e.g. `opened: sent · resolved:
    pending`, or `none`."""
    return " · ".join(states) if states else "none"


def _key_hex(key: int) -> str:
    return f"{key & 0xFFFF_FFFF_FFFF_FFFF:016x}"


def prefix_row(row: dict[str, Any]) -> dict[str, Any]:
    """One row of the top-prefixes table. Every request of a prefix row is
    fingerprinted (it has a first key), so its prompt tokens are also the
    fingerprinted prompt tokens the ceiling divides by."""
    prompt = int(row["prompt_tokens"] or 0)
    sums = {
        "prompt_tokens": prompt,
        "fp_prompt_tokens": prompt,
        "cached_tokens": int(row["cached_tokens"] or 0),
        "cacheable_tokens": int(row["cacheable_tokens"] or 0),
    }
    return {
        "prefix": _key_hex(int(row["first_key"])),
        "service": row["service"],
        "model": row["model"],
        "requests": int(row["requests"] or 0),
        "prompt_tokens": prompt,
        **ratios(sums, ("hit_rate", "cacheable_fraction")),
        "replicas": int(row["replicas"] or 0),
        "rewarms": int(row["rewarms"] or 0),
        "rewarm_tokens": int(row["rewarm_tokens"] or 0),
    }


def tables_payload(session: Session, settings: Settings, ctx: Context) -> dict[str, Any]:
    """The regressions (newest first, with their Slack alerts' state) and the top
    prefixes by prompt tokens."""
    reading = dashboard.read_tables(session, ctx.selection, ctx.window, TOP_PREFIXES)
    regressions, prefixes = reading.regressions, reading.prefixes
    return {
        "regressions": [
            regression_row(regression_to_json(r), alert_text(reading.alert_states.get(r.id, [])))
            for r in regressions
        ],
        "prefixes": [prefix_row(p) for p in prefixes],
        "notes": {
            "regressions": (
                None
                if regressions
                else "No regressions in this range. Detection looks for lasting hit-rate "
                f"drops every {format_duration(settings.detect_interval_s)} over "
                f"{format_duration(settings.detect_bucket_s)} buckets."
            ),
            "prefixes": None if prefixes else "No fingerprinted requests. " + FINGERPRINT_HINT,
        },
    }


def finding_row(finding: Finding) -> dict[str, Any]:
    """One row of the findings panel: the finding's contract JSON and its dollars a
    day worded (`$360/day`, `no prices`)."""
    return {**finding.as_json(), "cost": usd_per_day(finding.wasted_usd_per_day)}


def missing_line(code: str) -> dict[str, Any]:
    """What to send for the kinds a range cannot show (a MISSING_DATA sentence), with
    the docs that explain the field when there are."""
    text = MISSING_DATA[code]
    return {
        "code": code,
        "text": text[:1].upper() + text[1:] + ".",
        "docs": DOCUMENTED_MISSING.get(code),
    }


def findings_words(result: FindingsResult, min_share: float) -> dict[str, Any]:
    """The panel's line under its title, its note (no records; no finding) and what
    the records lack. Without records nothing is said to be missing: the other panels
    and the onboarding already say what to send."""
    has_data = result.days > 0
    share = pct(min_share)
    sub = (
        "Anti-patterns in this range's traffic, whether or not anything changed, each "
        f"affecting at least {share} of the prompt tokens of its service and model; "
        "worst first, per day"
    )
    if has_data:
        sub += f" of the range's {duration(result.days * dashboard.DAY_S)} of data"
    note = None
    if not has_data:
        note = NO_RECORDS
    elif not result.findings:
        note = f"No anti-pattern affects {share} or more of the prompt tokens."
    return {
        "sub": sub + ".",
        "note": note,
        "missing": [missing_line(code) for code in result.missing] if has_data else [],
    }


def findings_payload(session: Session, settings: Settings, ctx: Context) -> dict[str, Any]:
    """The findings panel: the anti-patterns of the view (service, model, range),
    worst first, each with its evidence and fix, and what the range's records lack."""
    result = dashboard.read_findings(session, settings, ctx.selection, ctx.window)
    shown = result.findings[:MAX_FINDING_ROWS]
    more = len(result.findings) - len(shown)
    return {
        "findings": [finding_row(f) for f in shown],
        "total": len(result.findings),
        "more": more,
        **findings_words(result, settings.finding_min_share),
        "more_note": (
            f"{more:,} more finding{'' if more == 1 else 's'} not shown (the "
            f"{len(shown)} that waste the most are; GET /v1/findings lists every one)."
            if more
            else None
        ),
        "docs": FINDINGS_DOCS,
    }
