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
from typing import Any

import polars as pl

from service.alerts.wording import pct
from service.findings import fixes
from service.findings.kinds import Finding
from service.findings.rewarms import Scope
from service.findings.thresholds import Thresholds

#: What one segment name of one scope is keyed by.
_NAME = ["service", "model", "name"]
#: One variant of a name, model-wide.
_HASH = ["model", "name", "hash"]


def _scope_frame(scopes: list[Scope]) -> pl.DataFrame:
    """The scopes' keys with their prompt tokens, to join the rollups' sums to."""
    return pl.DataFrame(
        {
            "service": [s.service for s in scopes],
            "model": [s.model for s in scopes],
            "scope_prompt": [float(s.totals["prompt_tokens"]) for s in scopes],
        },
        schema={"service": pl.Utf8, "model": pl.Utf8, "scope_prompt": pl.Float64},
    )


def _share(tokens: str) -> pl.Expr:
    """`tokens` over the scope's prompt tokens (0 without any)."""
    prompt = pl.col("scope_prompt")
    return pl.when(prompt > 0).then(pl.col(tokens) / prompt).otherwise(0.0).alias("share")


def volatile_findings(
    frames: SegmentFrames,
    scopes: list[Scope],
    thresholds: Thresholds,
    rate: Mapping[str, float | None],
) -> list[Finding]:
    """One finding per (scope, name) whose volatile hours carry at least `min_share`
    of the scope's prompt tokens. Every (scope, name) is summed at once (one grouped
    pass over the volatile hours); only those reported take a Python step, so 30,000
    names cost one pass, not one filter of every row per name."""
    if frames.volatile.is_empty() or not scopes:
        return []
    by_key = {(s.service, s.model): s for s in scopes}
    per_name = (
        frames.volatile.sort("bucket_us")
        .group_by(_NAME, maintain_order=True)
        .agg(
            pl.col("bucket_us").first().alias("since_us"),
            pl.len().alias("volatile_hours"),
            pl.col("carriers").mean(),
            pl.col("distinct").mean(),
            pl.col("prompt_tokens").sum(),
            pl.col("lost_tokens").sum(),
        )
        .join(_scope_frame(scopes), on=["service", "model"])
        .join(frames.spans.select(*_NAME, "hours"), on=_NAME, how="left")
        .with_columns(_share("prompt_tokens"), pl.col("hours").fill_null(0))
        .filter(pl.col("share") >= thresholds.min_share)
    )
    found = []
    for row in per_name.iter_rows(named=True):
        scope = by_key[(row["service"], row["model"])]
        found.append(_volatile(scope, row, rate.get(scope.model)))
    return found


def _volatile(scope: Scope, row: Mapping[str, Any], rate: float | None) -> Finding:
    """The finding of one (scope, name) from its sums over its volatile hours."""
    name, share = str(row["name"]), float(row["share"])
    carriers, distinct = float(row["carriers"]), float(row["distinct"])
    wasted = round(scope.per_day(float(row["lost_tokens"])))
    evidence = [
        f"segment `{name}`: {distinct:,.0f} variants per hour over {carriers:,.0f} requests "
        f"carrying it, in {row['volatile_hours']:,} of the {row['hours']:,} hours it was sent",
        f"the requests carrying it sent {pct(share)} of the prompt tokens; each variant makes "
        f"the static start from `{name}` on differ: {wasted:,} tokens a day not reused",
    ]
    return Finding(
        kind="volatile_segment",
        service=scope.service,
        model=scope.model,
        segment=name,
        since_us=int(row["since_us"]),
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

    def volatile_hours(self) -> dict[tuple[str, str], set[int]]:
        """Per (service, model), the hours in which any static segment was volatile."""
        out: dict[tuple[str, str], set[int]] = {}
        for service, model, bucket in (
            self.volatile.select("service", "model", "bucket_us").unique().iter_rows()
        ):
            out.setdefault((service, model), set()).add(bucket)
        return out

    def model_spans(self) -> pl.DataFrame:
        """(model, name, hours, carriers) over every service of the model."""
        return self.spans.filter(pl.col("service") == "").drop("service")


def drift_findings(
    frames: SegmentFrames,
    scopes: list[Scope],
    thresholds: Thresholds,
    rate: Mapping[str, float | None],
) -> list[Finding]:
    """One finding per drift and scope sending its variants whose minority variants
    carry at least `min_share` of the scope's prompt tokens. The drifts, their
    senders' sums and the evidence's figures are computed for every name at once
    (grouped passes over the frequent variants' rows); only the findings reported
    take a Python step."""
    rows = frames.variants
    if rows.is_empty() or not scopes:
        return []
    drifts = _drifts(frames, thresholds)
    if drifts.is_empty():
        return []
    members = drifts.select("gid", "model", "name", pl.col("hashes").alias("hash"), "top").explode(
        "hash"
    )
    sent = rows.join(members, on=_HASH)
    minority = pl.col("hash") != pl.col("top")
    per_scope = (
        sent.group_by(["gid", "service", "model"])
        .agg(
            pl.col("prompt_tokens").filter(minority).sum(),
            pl.col("lost_tokens").filter(minority).sum(),
        )
        .join(_scope_frame(scopes), on=["service", "model"])
        .with_columns(_share("prompt_tokens"))
        .filter(pl.col("share") >= thresholds.min_share)
        .sort(["gid", "service"])
    )
    if per_scope.is_empty():
        return []
    by_key = {(s.service, s.model): s for s in scopes}
    by_gid = {int(d["gid"]): d for d in drifts.iter_rows(named=True)}
    evidence = _evidence_facts(sent.filter(pl.col("gid").is_in(per_scope["gid"].implode())))
    found = []
    for row in per_scope.iter_rows(named=True):
        drift = _drift_of(by_gid[int(row["gid"])])
        scope = by_key[(row["service"], row["model"])]
        lines = _drift_evidence(drift, evidence[int(row["gid"])], thresholds)
        found.append(_drift_finding(drift, scope, row, lines, rate))
    return sorted(found, key=lambda f: (f.service, f.model, f.segment or ""))


def _drift_of(row: Mapping[str, Any]) -> _Drift:
    return _Drift(
        model=str(row["model"]),
        name=str(row["name"]),
        hashes=list(row["hashes"]),
        since_us=int(row["since_us"]),
        side_by_side_hours=int(row["side_by_side_hours"]),
        hours=int(row["hours"]),
        carriers=int(row["carriers"]),
        by_norm_hash=bool(row["by_norm_hash"]),
    )


def _drifts(frames: SegmentFrames, thresholds: Thresholds) -> pl.DataFrame:
    """Every drift of every (model, name) at once: one row per candidate group of
    variants (`_candidate_groups`) used side by side in at least `drift_hours` of
    the hours the name was carried, with `gid` (its number), `hashes` (most used
    first), `top`, `since_us`, `side_by_side_hours`, `hours`, `carriers` and
    `by_norm_hash`."""
    rows = frames.variants
    groups = _candidate_groups(rows, frames.bare, thresholds)
    if groups.is_empty():
        return groups
    members = groups.select("gid", "model", "name", pl.col("hashes").alias("hash")).explode("hash")
    side_by_side = (
        rows.select(*_HASH, "bucket_us")
        .join(members, on=_HASH)
        .group_by(["gid", "bucket_us"])
        .agg(pl.col("hash").n_unique().alias("variants"))
        .filter(pl.col("variants") >= 2)
        .group_by("gid")
        .agg(
            pl.col("bucket_us").min().alias("since_us"),
            pl.len().alias("side_by_side_hours"),
        )
    )
    spans = frames.model_spans()
    return (
        groups.join(side_by_side, on="gid")
        .join(spans, on=["model", "name"], how="left")
        .with_columns(pl.col("hours").fill_null(0), pl.col("carriers").fill_null(0))
        .filter(pl.col("side_by_side_hours") >= thresholds.drift_hours * pl.col("hours"))
        .with_columns(pl.col("hashes").list.first().alias("top"))
        .sort("gid")
    )


def _candidate_groups(
    rows: pl.DataFrame, bare: pl.DataFrame, thresholds: Thresholds
) -> pl.DataFrame:
    """Per (model, name), sets of two or more frequent hashes that look like one part
    rendered two ways: sharing a norm_hash; else, within one service sending 2 to
    drift_max_variants bare variants, those whose token counts are within the
    tolerance (each set once). Hashes most used first (ties by hash); a name's sets
    by norm_hash first, then by service. Columns: gid, model, name, hashes,
    by_norm_hash."""
    variants = (
        rows.group_by(_HASH)
        .agg(
            pl.col("requests").sum(),
            pl.col("norm_hash").drop_nulls().first(),
            pl.col("tokens").max(),
            pl.col("service").unique().alias("services"),
        )
        .sort(["model", "name", "requests", "hash"], descending=[False, False, True, False])
        .with_row_index("rank")
    )
    normed = (
        variants.filter(pl.col("norm_hash").is_not_null())
        .group_by(["model", "name", "norm_hash"])
        .agg(pl.col("hash").sort_by("rank").alias("hashes"), pl.col("rank").min().alias("order"))
        .filter(pl.col("hashes").list.len() >= 2)
        .select("model", "name", "hashes", "order", pl.lit(True).alias("by_norm_hash"))
    )
    allowed = bare.filter(
        (pl.col("distinct") >= 2) & (pl.col("distinct") <= thresholds.drift_max_variants)
    ).select("service", "model", "name")
    low, high = pl.col("tokens").min(), pl.col("tokens").max()
    by_service = (
        variants.filter(pl.col("norm_hash").is_null())
        .explode("services")
        .rename({"services": "service"})
        .join(allowed, on=["service", "model", "name"])
        .group_by(["model", "name", "service"])
        .agg(
            pl.col("hash").sort_by("rank").alias("hashes"),
            low.alias("low"),
            high.alias("high"),
        )
        .filter(
            (pl.col("hashes").list.len() >= 2)
            & (pl.col("low") > 0)
            & (pl.col("high") <= pl.col("low") * (1 + thresholds.drift_token_tolerance))
        )
        .sort(["model", "name", "service"])
        .with_columns(pl.col("hashes").list.join("\x00").alias("key"))
        .unique(subset=["model", "name", "key"], keep="first", maintain_order=True)
        .with_row_index("order")
        .select(
            "model",
            "name",
            "hashes",
            (pl.col("order").cast(pl.Int64) + len(variants)).alias("order"),
            pl.lit(False).alias("by_norm_hash"),
        )
    )
    both = pl.concat([normed.cast({"order": pl.Int64}), by_service])
    return both.sort(["model", "name", "order"]).drop("order").with_row_index("gid")


def _evidence_facts(sent: pl.DataFrame) -> dict[int, dict[str, dict[str, Any]]]:
    """Per drift (gid) and variant, what its evidence says: the variant's tokens, its
    requests model-wide and its senders ((service, scenario) by requests, the first
    three and how many), summed for every drift at once."""
    senders = (
        sent.group_by(["gid", "hash", "service", "scenario"])
        .agg(pl.col("requests").sum())
        .sort(
            ["gid", "hash", "requests", "service", "scenario"],
            descending=[False, False, True, False, False],
        )
        .group_by(["gid", "hash"], maintain_order=True)
        .agg(
            pl.col("requests").sum(),
            pl.col("service").head(3).alias("services"),
            pl.col("scenario").head(3).alias("scenarios"),
            pl.len().alias("senders"),
        )
    )
    tokens = sent.group_by(["gid", "hash"]).agg(pl.col("tokens").max())
    out: dict[int, dict[str, dict[str, Any]]] = {}
    for row in senders.join(tokens, on=["gid", "hash"]).iter_rows(named=True):
        out.setdefault(int(row["gid"]), {})[str(row["hash"])] = row
    return out


def _drift_finding(
    drift: _Drift,
    scope: Scope,
    sums: Mapping[str, Any],
    evidence: list[str],
    rate: Mapping[str, float | None],
) -> Finding:
    """The finding of one drift in one scope, from the sums of its minority variants
    (those other than the most used one, model-wide)."""
    wasted = round(scope.per_day(float(sums["lost_tokens"])))
    model_rate = rate.get(scope.model)
    return Finding(
        kind="template_drift",
        service=scope.service,
        model=scope.model,
        segment=drift.name,
        since_us=drift.since_us,
        share_of_prompt_tokens=float(sums["share"]),
        wasted_tokens_per_day=wasted,
        wasted_usd_per_day=None if model_rate is None else wasted * model_rate,
        evidence=evidence,
        fix=fixes.template_drift(drift.name),
        details={"variants": len(drift.hashes), "by_norm_hash": drift.by_norm_hash},
    )


def _drift_evidence(
    drift: _Drift, facts: Mapping[str, Mapping[str, Any]], thresholds: Thresholds
) -> list[str]:
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
        variant = facts[value]
        tokens = int(variant["tokens"])
        base_tokens = tokens if base_tokens is None else base_tokens
        delta = tokens - base_tokens
        diff = f", {delta:+,} vs the most used" if number > 1 else ""
        who = ", ".join(
            f"`{service}`" + (f" (scenario `{scenario}`)" if scenario else "")
            for service, scenario in zip(variant["services"], variant["scenarios"], strict=True)
        )
        senders = int(variant["senders"])
        more = f" and {senders - 3} more" if senders > 3 else ""
        share = int(variant["requests"]) / total if total else 0.0
        lines.append(
            f"variant {number} (hash `{value[:16]}`, {tokens:,} tokens{diff}): "
            f"{pct(share)} of the requests, sent by {who}{more}"
        )
    return lines
