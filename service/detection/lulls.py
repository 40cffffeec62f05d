"""Lulls: a drop that the traffic's own level explains (contract section 5c).

Fewer requests lower many hit rates by themselves: a managed API lets a prefix
expire when nobody sends it for its TTL (5 minutes), a self-hosted engine's
continuing sessions thin out. That is a property of the traffic: what it costs is
a finding (expiry at night, with its dollars), never a regression.

The seasonal shape (`service.detection.seasonal`) explains a lull once a few days
of the same kind are on record. Before that, and on days whose traffic is unlike
their season's (the first weekend, a holiday), the series' own history explains
it: the hit rate it had before the change *at the same load*. Load is the requests
per bucket; buckets within a factor of `BAND` of a bucket's load are its
references, and their token-weighted median hit rate is what that load normally
gives. A real regression at the same load falls below it; a quiet evening, the
first Saturday or a holiday does not.

A release that cuts the traffic it breaks (callers that wait longer send less)
lands at a load whose usual hit rate is high on a self-hosted engine, so it is
still a drop there; on a managed API whose quiet hours expire everything, such a
release could pass for a lull. docs/detection.md says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from service.detection.seasonal import weighted_median

Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]

#: References are the buckets whose requests are within this factor of a bucket's.
BAND = 1.3
#: A load is known once its references hold this many requests over this many
#: buckets.
MIN_REQUESTS = 60
MIN_BUCKETS = 6


@dataclass(frozen=True)
class LoadReference:
    """The hit rate a series had at each load, from buckets before a change."""

    log_load: Floats  # sorted
    hit_rate: Floats  # in that order
    tokens: Floats
    load_cumulative: Floats

    @staticmethod
    def of(hit_rate: Floats, tokens: Floats, load: Floats) -> LoadReference:
        """The reference buckets: their hit rates, prompt tokens and loads
        (`smoothed_load`)."""
        keep = load > 0
        order = np.argsort(np.log(load[keep]), kind="stable")
        sorted_load = load[keep][order]
        return LoadReference(
            log_load=np.log(sorted_load),
            hit_rate=hit_rate[keep][order],
            tokens=tokens[keep][order],
            load_cumulative=np.concatenate([[0.0], np.cumsum(sorted_load)]),
        )

    def expected(self, load: Floats) -> tuple[Floats, Bools]:
        """Per bucket of `load`: the usual hit rate at that load (the token-weighted
        median of the references within the band), and whether enough references
        hold it (their loads summing to `MIN_REQUESTS` requests)."""
        expected = np.zeros(len(load))
        known = np.zeros(len(load), dtype=np.bool_)
        if not len(self.log_load):
            return expected, known
        half = np.log(BAND)
        loads = np.log(np.maximum(load, 1e-9))
        lo = np.searchsorted(self.log_load, loads - half, side="left")
        hi = np.searchsorted(self.log_load, loads + half, side="right")
        enough = (hi - lo >= MIN_BUCKETS) & (
            self.load_cumulative[hi] - self.load_cumulative[lo] >= MIN_REQUESTS
        )
        for i in np.flatnonzero(enough):
            a, b = lo[i], hi[i]
            expected[i] = weighted_median(self.hit_rate[a:b], self.tokens[a:b])
            known[i] = True
        return expected, known


#: A bucket's load is its requests per bucket over this many seconds either side.
SMOOTH_S = 900


def smoothed_load(requests: Floats, bucket_us: npt.NDArray[np.int64], bucket_s: int) -> Floats:
    """Requests per bucket over the +-`SMOOTH_S` around each bucket, empty buckets
    counted as empty: a bucket's own count is Poisson noise around the traffic's rate
    (20 +- 4.5), too coarse to find the buckets whose traffic was like it; and a
    series leaves empty buckets out, so a Saturday night's one request an hour must
    not read as a weekday night's few a bucket."""
    half = SMOOTH_S * 1_000_000
    total = np.concatenate([[0.0], np.cumsum(requests)])
    lo = np.searchsorted(bucket_us, bucket_us - half, side="left")
    hi = np.searchsorted(bucket_us, bucket_us + half, side="right")
    span = (2 * SMOOTH_S) // bucket_s + 1
    return np.asarray((total[hi] - total[lo]) / span)
