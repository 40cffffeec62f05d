"""Unit tests of service.detection.lulls.LoadReference: the usual hit rate at a load,
read from running sums per hit-rate bin, against the exact token-weighted median of
the same references (the reference implementation)."""

from __future__ import annotations

import numpy as np
import pytest

from service.detection.lulls import BAND, BINS, MIN_BUCKETS, MIN_REQUESTS, LoadReference
from service.detection.seasonal import weighted_median


def exact(hit_rate: np.ndarray, tokens: np.ndarray, load: np.ndarray, at: float) -> float | None:
    """The token-weighted median hit rate of the references within the band of `at`
    (None: too few of them), computed directly."""
    keep = (load >= at / BAND) & (load <= at * BAND)
    if keep.sum() < MIN_BUCKETS or load[keep].sum() < MIN_REQUESTS:
        return None
    return weighted_median(hit_rate[keep], tokens[keep])


@pytest.mark.parametrize("seed", range(5))
def test_the_usual_hit_rate_at_a_load_is_the_weighted_median_of_its_band(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 2000
    load = np.exp(rng.uniform(np.log(0.5), np.log(80), n))
    hit_rate = np.clip(0.3 + 0.15 * np.log(load) + rng.normal(0, 0.1, n), 0, 1)
    tokens = rng.uniform(1e3, 1e5, n)
    queries = np.exp(rng.uniform(np.log(0.3), np.log(120), 300))
    expected, known = LoadReference.of(hit_rate, tokens, load).expected(queries)
    for q, value, is_known in zip(queries, expected, known, strict=True):
        want = exact(hit_rate, tokens, load, q)
        assert is_known == (want is not None)
        if want is not None:
            # within the bin holding the median (interpolated inside it)
            assert value == pytest.approx(want, abs=1.0 / BINS)


def test_no_references_know_no_load() -> None:
    empty = np.zeros(0)
    expected, known = LoadReference.of(empty, empty, empty).expected(np.array([5.0, 10.0]))
    assert not known.any() and (expected == 0).all()


def test_a_load_without_enough_requests_around_it_is_unknown() -> None:
    """Six references at 5 requests a bucket hold 30 requests: fewer than 60."""
    load = np.full(6, 5.0)
    reference = LoadReference.of(np.full(6, 0.8), np.full(6, 1e4), load)
    _, known = reference.expected(np.array([5.0]))
    assert not known[0]
    _, known = LoadReference.of(np.full(12, 0.8), np.full(12, 1e4), np.full(12, 5.0)).expected(
        np.array([5.0])
    )
    assert known[0]
