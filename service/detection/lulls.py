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
    requests_cumulative: Floats

    @staticmethod
    def of(hit_rate: Floats, tokens: Floats, requests: Floats) -> LoadReference:
        """`requests`: each bucket's load (`smoothed_load`)."""
        keep = requests > 0
        order = np.argsort(np.log(requests[keep]), kind="stable")
        req = requests[keep][order]
        return LoadReference(
            log_load=np.log(req),
            hit_rate=hit_rate[keep][order],
            tokens=tokens[keep][order],
            requests_cumulative=np.concatenate([[0.0], np.cumsum(req)]),
        )

    def expected(self, requests: Floats) -> tuple[Floats, Bools]:
        """Per bucket of `requests`: the usual hit rate at that load (the token-
        weighted median of the references within the band), and whether enough
        references hold it."""
        expected = np.zeros(len(requests))
        known = np.zeros(len(requests), dtype=np.bool_)
        if not len(self.log_load):
            return expected, known
        half = np.log(BAND)
        loads = np.log(np.maximum(requests, 1.0))
        lo = np.searchsorted(self.log_load, loads - half, side="left")
        hi = np.searchsorted(self.log_load, loads + half, side="right")
        enough = (hi - lo >= MIN_BUCKETS) & (
            self.requests_cumulative[hi] - self.requests_cumulative[lo] >= MIN_REQUESTS
        )
        for i in np.flatnonzero(enough):
            a, b = lo[i], hi[i]
            expected[i] = weighted_median(self.hit_rate[a:b], self.tokens[a:b])
            known[i] = True
        return expected, known


#: A bucket's load is the mean request count of the buckets this close to it.
SMOOTH_BUCKETS = 3


def smoothed_load(requests: Floats) -> Floats:
    """Requests per bucket averaged over +-`SMOOTH_BUCKETS` neighbours: a bucket's own
    count is Poisson noise around the traffic's rate (20 +- 4.5), too coarse to find
    the buckets whose traffic was like it."""
    kernel = np.ones(2 * SMOOTH_BUCKETS + 1)
    total = np.convolve(requests, kernel, mode="same")
    count = np.convolve(np.ones(len(requests)), kernel, mode="same")
    return np.asarray(total / count)
