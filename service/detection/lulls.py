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

Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]

#: References are the buckets whose requests are within this factor of a bucket's.
BAND = 1.3
#: A load is known once its references hold this many requests over this many
#: buckets.
MIN_REQUESTS = 60
MIN_BUCKETS = 6


#: The reference hit rates are binned this finely for their medians, interpolated
#: within the bin where half the tokens are reached (as a grouped median is).
BINS = 64
#: Buckets whose medians are taken at once (bounds the memory to a few MB).
_CHUNK = 2048


@dataclass(frozen=True)
class LoadReference:
    """The hit rate a series had at each load, from buckets before a change: the
    references sorted by load, with running sums of their loads and of their tokens
    per hit-rate bin, so that the references within any band of loads are a
    difference of two rows (the cost grows with the buckets, not with the bands)."""

    log_load: Floats  # sorted
    load_cumulative: Floats
    tokens_cumulative: Floats  # (references + 1, BINS): tokens per hit-rate bin, summed

    @staticmethod
    def of(hit_rate: Floats, tokens: Floats, load: Floats) -> LoadReference:
        """The reference buckets: their hit rates, prompt tokens and loads
        (`smoothed_load`)."""
        keep = load > 0
        order = np.argsort(np.log(load[keep]), kind="stable")
        sorted_load = load[keep][order]
        bins = np.clip((hit_rate[keep][order] * BINS).astype(np.intp), 0, BINS - 1)
        per_bin = np.zeros((len(order) + 1, BINS))
        per_bin[np.arange(1, len(order) + 1), bins] = tokens[keep][order]
        return LoadReference(
            log_load=np.log(sorted_load),
            load_cumulative=np.concatenate([[0.0], np.cumsum(sorted_load)]),
            tokens_cumulative=np.cumsum(per_bin, axis=0),
        )

    def expected(self, load: Floats) -> tuple[Floats, Bools]:
        """Per bucket of `load`: the usual hit rate at that load (the token-weighted
        median of the references within the band, to a bin), and whether enough
        references hold it (their loads summing to `MIN_REQUESTS` requests)."""
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
        index = np.flatnonzero(enough)
        medians = self._medians(lo[index], hi[index])
        expected[index] = np.nan_to_num(medians)
        known[index] = ~np.isnan(medians)
        return expected, known

    def _medians(self, lo: npt.NDArray[np.intp], hi: npt.NDArray[np.intp]) -> Floats:
        """The token-weighted median hit rate of references lo[i]:hi[i]: in the bin
        where half the window's tokens are reached, as far into it as the tokens
        still wanted are of the bin's (NaN: no tokens)."""
        out = np.empty(len(lo))
        for start in range(0, len(lo), _CHUNK):
            part = slice(start, start + _CHUNK)
            window = self.tokens_cumulative[hi[part]] - self.tokens_cumulative[lo[part]]
            running = np.cumsum(window, axis=1)
            half = running[:, -1] / 2
            at = np.argmax(running >= half[:, None], axis=1)
            rows = np.arange(len(at))
            inside = window[rows, at]
            wanted = half - (running[rows, at] - inside)
            with np.errstate(divide="ignore", invalid="ignore"):
                share = np.where(inside > 0, wanted / inside, 0.5)
            out[part] = np.where(half > 0, (at + share) / BINS, np.nan)
        return out


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
