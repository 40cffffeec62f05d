"""The findings read from the hourly rollup sums of each (service, model): the
rewarm kinds and `history_rewrite` (contract section 5b).

`hours` is one row per (hour, service, model) with the sums of
`service.analytics.definitions` (the chart rollups of level 0 at the hour grain).

- A rewarm kind (`REWARM_KINDS`: routing, cold_fanout, eviction, expiry,
  below_minimum) is the rewarms of one cause. It is reported when their rewarm
  tokens are at least `min_share` of the (service, model)'s prompt tokens; its
  `wasted_tokens_per_day` is those rewarm tokens per day, exactly, and its dollars
  the cause's `wasted_usd` per day (section 4a; None without prices).
- `history_rewrite` holds when at least `rewrite_share` of the continuing session
  requests rewrote their history; it is reported when the rewriting requests'
  prompt tokens are at least `min_share` of the (service, model)'s. Hours in which
  a static segment of the scope was volatile are left out (`history_findings`):
  there the varying start, its own finding, is what made the history differ. Its waste is
  their rewarm tokens (and dollars) per day, as the contract defines it; the tokens
  an append would have kept are not measured (a rewrite makes them uncacheable, not
  rewarms) and the evidence says how many prompt tokens the rewriting requests sent.

A day is 24 hours of the scope's own data: from the start of its first hour in
the range to the end of its last (`Scope.days`). `since` is the start of the first
hour in which the finding held on that hour's own sums (else its first hour with
any such tokens)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import polars as pl

from service.alerts.money import usd_per_day
from service.alerts.wording import duration, pct
from service.analytics.definitions import dollars
from service.findings import fixes
from service.findings.kinds import REWARM_KINDS, Finding
from service.findings.thresholds import Thresholds
from service.timeunits import DAY_US, HOUR_US

_PER_CAUSE = ("rewarms", "rewarm_tokens", "wasted_usd")
_REWRITE_SUMS = (
    "session_requests",
    "history_rewrites",
    "rewrite_prompt_tokens",
    "rewrite_rewarm_tokens",
    "rewrite_wasted_usd",
)

#: The rollup sums the findings read (`hours`' columns besides its keys).
SUMS_READ: tuple[str, ...] = (
    "requests",
    "prompt_tokens",
    "priced_requests",
    "fp_requests",
    "session_requests",
    "history_rewrites",
    "rewrite_prompt_tokens",
    "rewrite_rewarm_tokens",
    "rewrite_wasted_usd",
    "cache_key_requests",
    "rewarms_expiry_2ttl",
    *[f"{sum_}_{cause}" for cause in REWARM_KINDS.values() for sum_ in _PER_CAUSE],
)


@dataclass(frozen=True)
class Scope:
    """One (service, model)'s hours in the range, and their totals."""

    service: str
    model: str
    hours: pl.DataFrame  # sorted by bucket_us
    totals: dict[str, float]

    @cached_property
    def days(self) -> float:
        first, last = int(self.hours["bucket_us"][0]), int(self.hours["bucket_us"][-1])
        return (last + HOUR_US - first) / DAY_US

    def per_day(self, value: float) -> float:
        return value / self.days

    def usd_per_day(self, column: str) -> float | None:
        value = dollars(self.totals[column], int(self.totals["priced_requests"]))
        return None if value is None else value / self.days

    def since(self, part: str, whole: str, share: float) -> int:
        """The first hour where part / whole >= share, else the first with part > 0
        (over the columns' arrays: a finding each, thousands a read)."""
        buckets = self.hours["bucket_us"].to_numpy()
        parts = self.hours[part].to_numpy()
        wholes = self.hours[whole].to_numpy()
        for held in ((parts > 0) & (parts >= share * wholes), parts > 0):
            if held.any():
                return int(buckets[np.argmax(held)])
        return int(buckets[0])


@dataclass(frozen=True)
class Capacity:
    """What the capacity curve of the scope's model says (`service.analytics.capacity`):
    the smallest KV budget reaching the target share of the ceiling, over how many
    of the newest requests, and the budget a `config` event posted (None: none)."""

    needed_tokens: int | None
    ceiling: float | None
    target: float
    requests: int
    posted_tokens: int | None


@dataclass(frozen=True)
class Facts:
    """Per scope, what the evidence needs besides the sums."""

    replicas: int = 0
    ttl_s: float | None = None
    min_prompt_tokens: int | None = None
    capacity: Capacity | None = None


def scopes(hours: pl.DataFrame) -> list[Scope]:
    """The (service, model) scopes of the hourly sums, in name order. The totals of
    every scope are summed in one grouped pass and the hours split in one partition:
    20,000 services of one request each are one pass, not 20,000 sums per column."""
    if hours.is_empty():
        return []
    keys = ["service", "model"]
    sums = [c for c in hours.columns if c not in ("bucket_us", *keys)]
    ordered = hours.sort([*keys, "bucket_us"])
    totals = ordered.group_by(keys, maintain_order=True).agg(
        pl.len().alias("_hours"), pl.col(sums).sum().cast(pl.Float64)
    )
    out, start = [], 0
    for row in totals.iter_rows(named=True):
        n = int(row["_hours"])
        part = ordered.slice(start, n)  # a view of the sorted rows: no copy
        out.append(Scope(str(row["service"]), str(row["model"]), part, {c: row[c] for c in sums}))
        start += n
    return out


def _share(scope: Scope, column: str) -> float:
    prompt = scope.totals["prompt_tokens"]
    return scope.totals[column] / prompt if prompt else 0.0


#: The kinds whose evidence or fix needs the scope's profile (its TTL, its minimum).
_PROFILED_KINDS = ("expiry", "below_minimum")


def _reported(scope: Scope, kind: str, thresholds: Thresholds) -> bool:
    """Whether `rewarm_findings` reports the rewarm kind for the scope."""
    tokens = f"rewarm_tokens_{REWARM_KINDS[kind]}"
    return _share(scope, tokens) >= thresholds.min_share and scope.totals[tokens] > 0


def profiled_scopes(all_scopes: list[Scope], thresholds: Thresholds) -> list[Scope]:
    """The scopes whose caching profile a read resolves (a look-up of the newest
    record each): the first scope of each model (its prices price the model's
    findings) and those with a finding that names the TTL or the minimum. Resolving
    every scope cost a query each: 20,000 services, 20,000 queries."""
    models: set[str] = set()
    out = []
    for scope in all_scopes:
        first = scope.model not in models
        models.add(scope.model)
        if first or any(_reported(scope, kind, thresholds) for kind in _PROFILED_KINDS):
            out.append(scope)
    return out


def eviction_scopes(all_scopes: list[Scope], thresholds: Thresholds) -> list[Scope]:
    """The scopes with an eviction finding: the ones whose capacity curve is worth
    replaying for its evidence."""
    return [s for s in all_scopes if _share(s, "rewarm_tokens_eviction") >= thresholds.min_share]


def rewarm_findings(
    all_scopes: list[Scope], thresholds: Thresholds, facts: Mapping[tuple[str, str], Facts]
) -> list[Finding]:
    found = []
    for scope in all_scopes:
        scope_facts = facts.get((scope.service, scope.model), Facts())
        for kind, cause in REWARM_KINDS.items():
            tokens = f"rewarm_tokens_{cause}"
            share = _share(scope, tokens)
            if not _reported(scope, kind, thresholds):
                continue
            found.append(
                Finding(
                    kind=kind,
                    service=scope.service,
                    model=scope.model,
                    since_us=scope.since(tokens, "prompt_tokens", thresholds.min_share),
                    share_of_prompt_tokens=share,
                    wasted_tokens_per_day=round(scope.per_day(scope.totals[tokens])),
                    wasted_usd_per_day=scope.usd_per_day(f"wasted_usd_{cause}"),
                    evidence=_rewarm_evidence(kind, scope, scope_facts),
                    fix=_rewarm_fix(kind, scope, scope_facts),
                    details={"rewarms": int(scope.totals[f"rewarms_{cause}"])},
                )
            )
    return found


def history_findings(
    all_scopes: list[Scope],
    thresholds: Thresholds,
    unstable_hours: Mapping[tuple[str, str], set[int]],
) -> list[Finding]:
    """`history_rewrite` per scope, over its hours but those in `unstable_hours`: the
    hours in which a static segment of the scope was volatile. A varying start makes
    every continuation differ from its session's previous request, so those rewrites
    are the segment's (its own finding), not the history's."""
    found = []
    for scope in all_scopes:
        if not _may_rewrite(scope, thresholds):
            continue
        skipped = unstable_hours.get((scope.service, scope.model), set())
        rewrite = _history_rewrite(scope, thresholds, skipped)
        if rewrite is not None:
            found.append(rewrite)
    return found


def _may_rewrite(scope: Scope, thresholds: Thresholds) -> bool:
    """Whether the scope's totals allow a `history_rewrite` finding: its kept hours
    hold no more than the totals, so a scope without rewrites, or whose rewriting
    requests' prompt tokens are under `min_share` of the whole, has none. Most
    scopes are out from their totals alone (one filter of the hours each cost about
    a millisecond: 20,000 services, 20 s)."""
    t, prompt = scope.totals, scope.totals["prompt_tokens"]
    if not t["session_requests"] or not t["history_rewrites"]:
        return False
    share = t["rewrite_prompt_tokens"] / prompt if prompt else 0.0
    return share >= thresholds.min_share


def _history_rewrite(scope: Scope, thresholds: Thresholds, skipped: set[int]) -> Finding | None:
    kept = scope.hours.filter(~pl.col("bucket_us").is_in(sorted(skipped)))
    t = {c: float(kept[c].sum()) for c in _REWRITE_SUMS}
    continuing, rewrites = t["session_requests"], t["history_rewrites"]
    prompt = scope.totals["prompt_tokens"]
    share = t["rewrite_prompt_tokens"] / prompt if prompt else 0.0
    if not continuing or rewrites < thresholds.rewrite_share * continuing:
        return None
    if share < thresholds.min_share:
        return None
    evidence = [
        f"{int(rewrites):,} of {int(continuing):,} continuing session requests "
        f"({pct(rewrites / continuing)}) rewrote their history instead of appending to it: "
        "their leading blocks in common with the session's previous request cover less "
        "than 90% of it",
        f"the rewriting requests sent {int(t['rewrite_prompt_tokens']):,} prompt tokens "
        f"({pct(share)} of the prompt tokens), "
        f"{scope.per_day(t['rewrite_prompt_tokens']):,.0f} a day",
    ]
    left_out = scope.hours.height - kept.height
    if left_out:
        evidence.append(
            f"{left_out:,} hour{'s' if left_out != 1 else ''} in which a static segment "
            "varied are left out: their rewrites are that segment's (its own finding)"
        )
    since = Scope(scope.service, scope.model, kept, scope.totals).since(
        "history_rewrites", "session_requests", thresholds.rewrite_share
    )
    usd = dollars(t["rewrite_wasted_usd"], int(scope.totals["priced_requests"]))
    return Finding(
        kind="history_rewrite",
        service=scope.service,
        model=scope.model,
        since_us=since,
        share_of_prompt_tokens=share,
        wasted_tokens_per_day=round(scope.per_day(t["rewrite_rewarm_tokens"])),
        wasted_usd_per_day=None if usd is None else scope.per_day(usd),
        evidence=evidence,
        fix=fixes.HISTORY_REWRITE,
        details={"rewrites": int(rewrites), "continuing": int(continuing)},
    )


def _rewarm_fix(kind: str, scope: Scope, facts: Facts) -> str:
    if kind == "routing":
        return fixes.routing(scope.totals["cache_key_requests"] > 0)
    if kind == "cold_fanout":
        return fixes.COLD_FANOUT
    if kind == "eviction":
        return fixes.eviction(facts.capacity.needed_tokens if facts.capacity else None)
    if kind == "expiry":
        quiet = quiet_hours(scope, "expiry")
        return fixes.expiry(facts.ttl_s, None if quiet is None else quiet.usd_per_day)
    return fixes.below_minimum(facts.min_prompt_tokens)


def _rewarm_evidence(kind: str, scope: Scope, facts: Facts) -> list[str]:
    cause = REWARM_KINDS[kind]
    t = scope.totals
    count, tokens = int(t[f"rewarms_{cause}"]), int(t[f"rewarm_tokens_{cause}"])
    head = f"{tokens:,} tokens recomputed ({pct(_share(scope, f'rewarm_tokens_{cause}'))} of "
    head += "the prompt tokens)"
    if kind == "routing":
        carried = t["cache_key_requests"] / t["requests"] if t["requests"] else 0.0
        return [
            f"{count:,} requests reached a replica that had not served their prefix "
            f"while another had, within the reuse window: {head}",
            f"{facts.replicas:,} replica{'s' if facts.replicas != 1 else ''} served; "
            + (
                f"{pct(carried)} of the requests carried a `cache_key`"
                if carried
                else "no request carried a `cache_key`"
            ),
        ]
    if kind == "cold_fanout":
        return [
            f"{count:,} requests started within one TTFT of an earlier request with the "
            f"same prefix, while it was still in prefill: {head}"
        ]
    if kind == "eviction":
        return [
            f"{count:,} requests missed a prefix their own replica had served within the "
            f"reuse window (evicted): {head}",
            *_capacity_evidence(scope.model, facts.capacity),
        ]
    if kind == "expiry":
        within = int(t["rewarms_expiry_2ttl"])
        ttl = f" (TTL {duration(facts.ttl_s)})" if facts.ttl_s else ""
        return [
            f"{count:,} requests came back to their prefix after it had expired{ttl}: {head}",
            f"{within:,} of them ({pct(within / count if count else 0.0)}) came back "
            "within twice the TTL: a TTL twice as long would have kept those",
            *_quiet_hours_evidence(scope, "expiry"),
        ]
    minimum = f"{facts.min_prompt_tokens:,}" if facts.min_prompt_tokens else "the minimum"
    return [
        f"{count:,} requests with a reusable prefix were shorter than the {minimum} "
        f"tokens the provider caches at least: {head}"
    ]


#: An hour is quiet when its requests are under this share of a busy hour's (the
#: 90th percentile of the scope's hours): nights, evenings and weekends.
QUIET_SHARE = 0.25


@dataclass(frozen=True)
class Quiet:
    """How much of a cause's waste falls in the scope's quiet hours."""

    hours: int
    share: float  # of the cause's rewarm tokens
    usd_per_day: float | None


def quiet_hours(scope: Scope, cause: str) -> Quiet | None:
    """The share of a cause's rewarm tokens (and dollars a day) in the quiet hours:
    what a lull costs. A managed API lets a prefix expire when nobody sends it for its
    TTL, so fewer requests at night mean more expiry: a property of the traffic, worth
    its dollars here, never a regression (contract section 5c). None: no quiet hour."""
    hours = scope.hours
    requests = hours["requests"].cast(pl.Float64)
    busy = float(requests.quantile(0.9) or 0.0)
    quiet = hours.filter(requests < QUIET_SHARE * busy)
    total = scope.totals[f"rewarm_tokens_{cause}"]
    if quiet.is_empty() or total <= 0:
        return None
    usd = dollars(float(quiet[f"wasted_usd_{cause}"].sum()), int(scope.totals["priced_requests"]))
    return Quiet(
        hours=quiet.height,
        share=float(quiet[f"rewarm_tokens_{cause}"].sum()) / total,
        usd_per_day=None if usd is None else scope.per_day(usd),
    )


def _quiet_hours_evidence(scope: Scope, cause: str) -> list[str]:
    quiet = quiet_hours(scope, cause)
    if quiet is None:
        return []
    usd = "" if quiet.usd_per_day is None else f", {usd_per_day(quiet.usd_per_day)}"
    return [
        f"{pct(quiet.share)} of them came in the {quiet.hours:,} quiet hours (under "
        f"{pct(QUIET_SHARE)} of a busy hour's requests: nights, evenings, weekends{usd}): "
        "fewer requests than one per TTL let a prefix expire, a lull of the traffic and "
        "not a regression"
    ]


def _capacity_evidence(model: str, capacity: Capacity | None) -> list[str]:
    if capacity is None or capacity.requests == 0:
        return ["no request of the model has `block_hashes`: no capacity curve to size it"]
    lines = []
    sample = f"the capacity curve of the newest {capacity.requests:,} requests of `{model}`"
    if capacity.needed_tokens is None:
        lines.append(f"{sample} never reaches {pct(capacity.target)} of its ceiling")
    else:
        lines.append(
            f"{sample}: a KV budget of {capacity.needed_tokens:,} tokens reaches "
            f"{pct(capacity.target)} of the ceiling ({pct(capacity.ceiling)})"
        )
    if capacity.posted_tokens is None:
        lines.append("no `config` event told the KV budget (post one to compare)")
    else:
        lines.append(f"the posted KV budget is {capacity.posted_tokens:,} tokens")
    return lines
