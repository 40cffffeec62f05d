"""The segment findings, read from the segment rollups (`service.rollups.segments`):
`volatile_segment` and `template_drift` (contract section 5b).

`SegmentFrames` holds the segment rollups of the range for every service of the
scopes' models (template drift compares services), as the database sums them.

volatile_segment: an hour is volatile for a (service, model, segment) when at
least `volatile_min_requests` requests carried the segment and more than
`volatile_share` of its hashes that hour were distinct (a single request, or two,
cannot tell a stable part from a varying one). It is reported when the prompt
tokens of the requests carrying it in volatile hours are at least `min_share` of
the scope's. Its waste is those requests' `lost_tokens` per day: the static start
from the segment on that they did not reuse.

template_drift: over the range and all services of the model, the *variants* of a
segment name (its hashes) that share a `norm_hash`, each carried by at least
`drift_variant_share` of the requests carrying the name, two or more of them used
in the same hours in at least `drift_hours` of the hours the name was carried.
Without `norm_hash`, within one service: 2 to `drift_max_variants` hashes of the
name, at least two of them so used, their token counts within
`drift_token_tolerance` of each other. A scope is reported when the requests it
sent with a variant other than the most used one (model-wide) carry at least
`min_share` of its prompt tokens; the waste is their `lost_tokens` per day (the
cold starts the split costs: a variant warm on its own loses nothing more).

Dollars: the tokens at the model's input price less its cached price (`rate`,
dollars per token; None: no prices)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import polars as pl

from service.alerts.wording import pct
from service.findings import fixes
from service.findings.kinds import Finding
from service.findings.rewarms import Scope
from service.findings.thresholds import Thresholds
from service.rollups.segments import FOLDED_HASH

_VARIANT = pl.col("hash") != FOLDED_HASH


def volatile_findings(
    frames: SegmentFrames,
    scopes: list[Scope],
    thresholds: Thresholds,
    rate: Mapping[str, float | None],
) -> list[Finding]:
    found = []
    for scope in scopes:
        mine = frames.volatile.filter(
            (pl.col("service") == scope.service) & (pl.col("model") == scope.model)
        )
        for (name,), volatile in mine.sort("bucket_us").group_by(["name"], maintain_order=True):
            hours = frames.hours_sent(scope.service, scope.model, str(name))
            finding = _volatile(
                scope, str(name), volatile, hours, thresholds, rate.get(scope.model)
            )
            if finding is not None:
                found.append(finding)
    return found


def _volatile(
    scope: Scope,
    name: str,
    volatile: pl.DataFrame,
    hours: int,
    thresholds: Thresholds,
    rate: float | None,
) -> Finding | None:
    prompt = scope.totals["prompt_tokens"]
    share = float(volatile["prompt_tokens"].sum()) / prompt if prompt else 0.0
    if share < thresholds.min_share:
        return None
    carriers = float(volatile["carriers"].mean())  # type: ignore[arg-type]
    distinct = float(volatile["distinct"].mean())  # type: ignore[arg-type]
    wasted = round(scope.per_day(float(volatile["lost_tokens"].sum())))
    evidence = [
        f"segment `{name}`: {distinct:,.0f} variants per hour over {carriers:,.0f} requests "
        f"carrying it, in {volatile.height:,} of the {hours:,} hours it was sent",
        f"the requests carrying it sent {pct(share)} of the prompt tokens; each variant makes "
        f"the static start from `{name}` on differ: {wasted:,} tokens a day not reused",
    ]
    return Finding(
        kind="volatile_segment",
        service=scope.service,
        model=scope.model,
        segment=name,
        since_us=int(volatile["bucket_us"][0]),
        share_of_prompt_tokens=share,
        wasted_tokens_per_day=wasted,
        wasted_usd_per_day=None if rate is None else wasted * rate,
        evidence=evidence,
        fix=fixes.volatile_segment(name),
        details={"variants_per_hour": distinct, "requests_per_hour": carriers},
    )


@dataclass(frozen=True)
class _Drift:
    """Variants of one segment name of one model that split its cache."""

    model: str
    name: str
    hashes: list[str]  # most used first
    since_us: int
    side_by_side_hours: int
    hours: int
    carriers: int  # requests carrying the name, model-wide
    by_norm_hash: bool


@dataclass(frozen=True)
class SegmentFrames:
    """The segment rollups of a range as the database sums them
    (`service.repository.segments`): the `volatile` hours of each (service, model,
    name) with their carriers, distinct variants, prompt and lost tokens; the
    `spans` (hours carried and carriers) per (service, model, name) and, with
    service '', per (model, name); the rows of the frequent `variants` (each
    carried by at least `drift_variant_share` of its name's requests); and per
    (service, model, name) the count of `bare` variants (sent without norm_hash)."""

    volatile: pl.DataFrame
    spans: pl.DataFrame
    variants: pl.DataFrame
    bare: pl.DataFrame

    def _span(self, service: str, model: str, name: str) -> tuple[int, int]:
        row = self.spans.filter(
            (pl.col("service") == service) & (pl.col("model") == model) & (pl.col("name") == name)
        )
        return (int(row["hours"][0]), int(row["carriers"][0])) if row.height else (0, 0)

    def hours_sent(self, service: str, model: str, name: str) -> int:
        return self._span(service, model, name)[0]

    def volatile_hours(self) -> dict[tuple[str, str], set[int]]:
        """Per (service, model), the hours in which any static segment was volatile."""
        out: dict[tuple[str, str], set[int]] = {}
        for service, model, bucket in self.volatile.select(
            "service", "model", "bucket_us"
        ).iter_rows():
            out.setdefault((service, model), set()).add(bucket)
        return out

    def model_span(self, model: str, name: str) -> tuple[int, int]:
        """(hours, carriers) of a name over every service of the model."""
        return self._span("", model, name)


def drift_findings(
    frames: SegmentFrames,
    scopes: list[Scope],
    thresholds: Thresholds,
    rate: Mapping[str, float | None],
) -> list[Finding]:
    rows = frames.variants
    if rows.is_empty():
        return []
    found = []
    wanted = {(s.service, s.model): s for s in scopes}
    for drift in _drifts(frames, thresholds):
        variants = rows.filter(
            (pl.col("model") == drift.model)
            & (pl.col("name") == drift.name)
            & pl.col("hash").is_in(drift.hashes)
        )
        for (service,), sent in variants.group_by(["service"], maintain_order=True):
            scope = wanted.get((str(service), drift.model))
            if scope is not None:
                finding = _drift_finding(drift, scope, sent, variants, thresholds, rate)
                if finding is not None:
                    found.append(finding)
    return sorted(found, key=lambda f: (f.service, f.model, f.segment or ""))


def _drifts(frames: SegmentFrames, thresholds: Thresholds) -> list[_Drift]:
    out = []
    for (model, name), named in frames.variants.group_by(["model", "name"], maintain_order=True):
        variants = (
            named.group_by("hash")
            .agg(
                pl.col("requests").sum(),
                pl.col("norm_hash").drop_nulls().first(),
                pl.col("tokens").max(),
                pl.col("service").unique().alias("services"),
            )
            .sort(["requests", "hash"], descending=[True, False])
        )
        hours, carriers = frames.model_span(str(model), str(name))
        bare = frames.bare.filter((pl.col("model") == model) & (pl.col("name") == name))
        for group, by_norm in _candidate_groups(variants, bare, thresholds):
            drift = _side_by_side(named, group, hours, thresholds)
            if drift is not None:
                out.append(_Drift(str(model), str(name), group, *drift, hours, carriers, by_norm))
    return out


def _candidate_groups(
    variants: pl.DataFrame, bare: pl.DataFrame, thresholds: Thresholds
) -> list[tuple[list[str], bool]]:
    """Sets of two or more frequent hashes that look like one part rendered two ways:
    sharing a norm_hash; else, within one service sending 2 to drift_max_variants
    bare variants, those whose token counts are within the tolerance."""
    groups: list[tuple[list[str], bool]] = []
    normed = variants.filter(pl.col("norm_hash").is_not_null())
    for _, same in normed.group_by("norm_hash", maintain_order=True):
        if same.height >= 2:
            groups.append((same["hash"].to_list(), True))
    unnormed = variants.filter(pl.col("norm_hash").is_null())
    for service, distinct in bare.select("service", "distinct").sort("service").iter_rows():
        if not 2 <= distinct <= thresholds.drift_max_variants:
            continue
        sent = unnormed.filter(pl.col("services").list.contains(service))
        if sent.height < 2:
            continue
        tokens = sent["tokens"]
        low, high = int(tokens.min()), int(tokens.max())  # type: ignore[arg-type]
        if low > 0 and high <= low * (1 + thresholds.drift_token_tolerance):
            group = sent["hash"].to_list()
            if (group, False) not in groups:
                groups.append((group, False))
    return groups


def _side_by_side(
    named: pl.DataFrame, group: list[str], hours: int, thresholds: Thresholds
) -> tuple[int, int] | None:
    """(since, hours) when two or more of the group were used in the same hours in
    at least `drift_hours` of the `hours` the part was carried; else None."""
    per_hour = (
        named.filter(pl.col("hash").is_in(group))
        .group_by("bucket_us")
        .agg(pl.col("hash").n_unique().alias("variants"))
        .filter(pl.col("variants") >= 2)
        .sort("bucket_us")
    )
    if per_hour.is_empty() or per_hour.height < thresholds.drift_hours * hours:
        return None
    return int(per_hour["bucket_us"][0]), per_hour.height


def _drift_finding(
    drift: _Drift,
    scope: Scope,
    sent: pl.DataFrame,
    variants: pl.DataFrame,
    thresholds: Thresholds,
    rate: Mapping[str, float | None],
) -> Finding | None:
    top = drift.hashes[0]
    minority = sent.filter(pl.col("hash") != top)
    prompt = scope.totals["prompt_tokens"]
    share = float(minority["prompt_tokens"].sum()) / prompt if prompt else 0.0
    if share < thresholds.min_share:
        return None
    wasted = round(scope.per_day(float(minority["lost_tokens"].sum())))
    model_rate = rate.get(scope.model)
    return Finding(
        kind="template_drift",
        service=scope.service,
        model=scope.model,
        segment=drift.name,
        since_us=drift.since_us,
        share_of_prompt_tokens=share,
        wasted_tokens_per_day=wasted,
        wasted_usd_per_day=None if model_rate is None else wasted * model_rate,
        evidence=_drift_evidence(drift, variants, thresholds),
        fix=fixes.template_drift(drift.name),
        details={"variants": len(drift.hashes), "by_norm_hash": drift.by_norm_hash},
    )


def _drift_evidence(drift: _Drift, variants: pl.DataFrame, thresholds: Thresholds) -> list[str]:
    how = (
        "that differ only in rendering (the same `norm_hash`)"
        if drift.by_norm_hash
        else f"whose token counts are within {pct(thresholds.drift_token_tolerance)} of each "
        "other (no `norm_hash` sent)"
    )
    lines = [
        f"segment `{drift.name}` is sent {len(drift.hashes)} ways {how}, side by side in "
        f"{drift.side_by_side_hours:,} of the {drift.hours:,} hours it was sent"
    ]
    total = drift.carriers
    base_tokens = None
    for number, value in enumerate(drift.hashes, start=1):
        rows = variants.filter(pl.col("hash") == value)
        tokens = int(rows["tokens"].max())  # type: ignore[arg-type]
        base_tokens = tokens if base_tokens is None else base_tokens
        delta = tokens - base_tokens
        diff = f", {delta:+,} vs the most used" if number > 1 else ""
        senders = (
            rows.group_by(["service", "scenario"])
            .agg(pl.col("requests").sum())
            .sort(["requests", "service", "scenario"], descending=[True, False, False])
        )
        who = ", ".join(
            f"`{r['service']}`" + (f" (scenario `{r['scenario']}`)" if r["scenario"] else "")
            for r in senders.head(3).to_dicts()
        )
        more = f" and {senders.height - 3} more" if senders.height > 3 else ""
        share = int(rows["requests"].sum()) / total if total else 0.0
        lines.append(
            f"variant {number} (hash `{value[:16]}`, {tokens:,} tokens{diff}): "
            f"{pct(share)} of the requests, sent by {who}{more}"
        )
    return lines
