"""Canaries (contract section 5a), as pure functions over the deploy tags' detection
series of one (service, model).

A canary is not a change in time but a difference side by side: while two deploy
tags of one (service, model) serve in the same buckets, the newer tag (first seen
later) is compared with the tag it replaced, over the buckets both served. Both sides
see the same hours, the same load and the same cache (the scope of reuse is the
model), so the difference is the release's. The rule is the regression's: the newer
tag's hit rate is lower by `min_abs` and `min_rel` over those buckets, below half-way
in at least `min_buckets` of them (lasting, not one cold bucket), and by `z_score`
standard errors of both tags' request counts. It is found while the canary is small,
`min_buckets` buckets after its first request.

The tag a newer one replaced is the older one that served the most prompt tokens
beside it, counting in each of its buckets only the busiest older tag there
(`replaced`): the release it was rolled out from. Each tag is compared with that
one alone, so the work is one pass over the tags' buckets whatever their number
(issue 32: comparing each tag with
every older one took 41 s at 4,000 tags and minutes at 20,000). A build number per
deploy is thousands of tags a fortnight; a canary of one is still the tag beside the
release before it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from service.analytics.definitions import RATIOS, ratio
from service.detection.changepoints import DropRule
from service.detection.groups import EPSILON, binomial_variance
from service.detection.series import Series, Stretch, stretch


@dataclass(frozen=True)
class Canary:
    """A newer tag whose hit rate is lower than the older one's beside it."""

    tag: str
    baseline: str
    first_bucket_us: int  # the newer tag's first bucket in the series
    buckets: int  # buckets both served
    share: float  # the newer tag's share of both tags' requests in those buckets
    before: Stretch  # the older tag over those buckets
    after: Stretch  # the newer tag over those buckets
    after_series: Series  # the newer tag over those buckets, bucket by bucket
    recovered_at_us: int | None


def canaries(tags: dict[str, Series], rule: DropRule, bucket_us: int) -> list[Canary]:
    """Every newer tag that, beside the tag it replaced (`replaced`), has the lower
    hit rate by the rule (see the module's docstring); in the order the tags were
    first seen."""
    found = []
    for tag, baseline in replaced(tags).items():
        canary = _compare(tag, tags[tag], baseline, tags[baseline], rule, bucket_us)
        if canary is not None:
            found.append(canary)
    return found


def replaced(tags: dict[str, Series]) -> dict[str, str]:
    """Per tag that served beside an older one, the older tag it replaced (older:
    first seen earlier, or in the same bucket with a name before it): the one that
    served the most prompt tokens beside it, counting in each of its buckets only
    the busiest older tag there (ties: the older). A canary beside a release is that
    release's, also while another canary serves beside both; a canary started as the
    one before was rolled out everywhere is that one's. Linear in the buckets the
    tags served, not in the square of the tags: each (tag, bucket) is looked at once
    (`_busiest_older`), then summed per (tag, older tag)."""
    names = sorted((int(s.bucket_us[0]), tag) for tag, s in tags.items() if len(s))
    if len(names) < 2:
        return {}
    series = [tags[tag] for _, tag in names]
    which = np.repeat(np.arange(len(series), dtype=np.int64), [len(s) for s in series])
    buckets = np.concatenate([s.bucket_us for s in series])
    tokens = np.concatenate([s.sums["prompt_tokens"] for s in series]).astype(np.int64)
    older, older_tokens = _busiest_older(buckets, which, tokens)
    beside = older >= 0
    if not beside.any():
        return {}
    pair, at = np.unique(which[beside] * len(series) + older[beside], return_inverse=True)
    summed = np.bincount(at, weights=older_tokens[beside], minlength=len(pair))
    newer_of, older_of = pair // len(series), pair % len(series)
    # Per newer tag, its older tags by the most tokens beside it, the older first on ties.
    ranked = np.lexsort((older_of, -summed, newer_of))
    first = ranked[np.r_[True, newer_of[ranked][1:] != newer_of[ranked][:-1]]]
    return {
        names[int(new)][1]: names[int(old)][1]
        for new, old in zip(newer_of[first], older_of[first], strict=True)
    }


def _busiest_older(
    buckets: npt.NDArray[np.int64], which: npt.NDArray[np.int64], tokens: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Per (tag, bucket) row (`which`: the tag's rank in age), the busiest tag of
    lower rank serving in the same bucket (-1: none) and its prompt tokens there: a
    running maximum over each bucket's rows in age order (ties: the older)."""
    older = np.full(len(which), -1, dtype=np.int64)
    older_tokens = np.zeros(len(which), dtype=np.int64)
    bucket_list, which_list, token_list = buckets.tolist(), which.tolist(), tokens.tolist()
    current, lead, lead_tokens = None, -1, -1
    for r in np.lexsort((which, buckets)).tolist():
        if bucket_list[r] != current:
            current, lead, lead_tokens = bucket_list[r], -1, -1
        if lead >= 0:
            older[r], older_tokens[r] = lead, lead_tokens
        if token_list[r] > lead_tokens:
            lead, lead_tokens = which_list[r], token_list[r]
    return older, older_tokens


def _subset(series: Series, keep: npt.NDArray[np.intp] | slice) -> Series:
    return Series(
        bucket_us=series.bucket_us[keep],
        sums={name: values[keep] for name, values in series.sums.items()},
        distinct_prefixes=series.distinct_prefixes[keep],
        replicas=series.replicas[keep],
    )


def _beside(older: Series, newer: Series) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """The buckets both tags served, as indexes into the newer's and the older's.
    The older is searched over the newer's span only (from its first bucket to its
    last), so a long-lived release costs each tag compared with it that tag's
    buckets, not its own whole fortnight."""
    start = int(np.searchsorted(older.bucket_us, newer.bucket_us[0], side="left"))
    end = int(np.searchsorted(older.bucket_us, newer.bucket_us[-1], side="right"))
    _, in_new, in_old = np.intersect1d(
        newer.bucket_us, older.bucket_us[start:end], assume_unique=True, return_indices=True
    )
    return in_new, in_old + start


def _compare(
    tag: str, newer: Series, baseline: str, older: Series, rule: DropRule, bucket_us: int
) -> Canary | None:
    in_new, in_old = _beside(older, newer)
    if len(in_new) < rule.min_buckets:
        return None
    # The hit rates first (a stretch's, from two sums): most tags are no canary.
    if _fall(_hit_rate(older, in_old), _hit_rate(newer, in_new), rule) is None:
        return None
    new, old = _subset(newer, in_new), _subset(older, in_old)
    before, after = stretch(old, 0, len(old)), stretch(new, 0, len(new))
    fall = _fall(before.hit_rate, after.hit_rate, rule)
    if fall is None:
        return None
    midpoint = (before.hit_rate + after.hit_rate) / 2
    if int((new.hit_rate <= midpoint).sum()) < rule.min_buckets:
        return None
    variance = _mean_variance(old, before.hit_rate) + _mean_variance(new, after.hit_rate)
    if fall < rule.z_score * math.sqrt(variance):
        return None
    requests = new.sums["requests"].sum() + old.sums["requests"].sum()
    return Canary(
        tag=tag,
        baseline=baseline,
        first_bucket_us=int(newer.bucket_us[0]),
        buckets=len(in_new),
        share=float(new.sums["requests"].sum() / max(requests, 1)),
        before=before,
        after=after,
        after_series=new,
        recovered_at_us=_recovered(new, old, newer, older, fall, rule, bucket_us),
    )


def _hit_rate(series: Series, index: npt.NDArray[np.intp]) -> float:
    """RATIOS["hit_rate"] over the buckets of `index`, as `stretch` has it."""
    hit_rate = RATIOS["hit_rate"]
    sums = series.sums
    return (
        ratio(sums[hit_rate.numerator][index].sum(), sums[hit_rate.denominator][index].sum()) or 0.0
    )


def _fall(was: float, now: float, rule: DropRule) -> float | None:
    """How far the newer tag's hit rate is below the older's, when by the rule's
    amounts (absolute and relative); else None."""
    fall = was - now + EPSILON
    if fall < rule.min_abs or fall < rule.min_rel * was:
        return None
    return fall


def _mean_variance(series: Series, level: float) -> float:
    """Of a token-weighted mean hit rate over the series' buckets: binomial over each
    bucket's requests (contract section 5c: evidence by counts)."""
    w = series.weight
    variance = binomial_variance(series, np.arange(len(series)), level)
    return float((w * w * variance).sum() / max(float(w.sum()) ** 2, 1e-12))


def _recovered(
    new: Series,
    old: Series,
    newer: Series,
    older: Series,
    fall: float,
    rule: DropRule,
    bucket_us: int,
) -> int | None:
    """When the canary stopped hurting: its newest `min_buckets` buckets beside the
    older tag are back near it (a fix shipped under the same tag), or it stopped
    serving while the older tag went on (rolled back). A canary that replaced the
    older tag stays open: the service's own series carries the drop from there."""
    recent = slice(len(new) - rule.min_buckets, len(new))
    now_old = stretch(old, recent.start, recent.stop).hit_rate
    now_new = stretch(new, recent.start, recent.stop).hit_rate
    if now_old - now_new < max(rule.min_abs / 2, fall / 4):
        return int(new.bucket_us[recent.start])
    if older.bucket_us[-1] > newer.bucket_us[-1]:
        return int(newer.bucket_us[-1]) + bucket_us
    return None
