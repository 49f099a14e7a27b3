"""Rate from the stamps' period (stats.rate_from_periods): conforming stamps PASS whatever the
dropout, a wrong rate FAILs, and the interval covers the true rate under jitter."""

from __future__ import annotations

import numpy as np
from scipy.stats import binom

from simconform.verify import stats

BAND = (0.98, 1.02)  # the default rate_rel 2 %, relative


def judged(stamps_ns: np.ndarray, rate: float) -> tuple[stats.Estimate, str]:
    est, _, _ = stats.rate_from_periods(np.diff(np.sort(stamps_ns)))
    return est, stats.verdict(est.ci, (rate * BAND[0], rate * BAND[1]))


def test_exactly_periodic_stamps_pass_with_a_ci_of_nonzero_width() -> None:
    for rate in (10.0, 30.0, 100.0):  # 30 Hz: integer-ns stamps alternate 33333333 / 33333334
        stamps = np.round(np.arange(4) * 1e9 / rate).astype(np.int64)  # a 0.3 s demo
        est, v = judged(stamps, rate)
        assert v == "pass", (rate, est)
        assert est.ci[0] < rate < est.ci[1]


def test_dropped_samples_do_not_lower_the_rate() -> None:
    rng = np.random.default_rng(1)
    stamps = np.round(np.arange(200) * 1e8).astype(np.int64)
    kept = stamps[rng.random(200) > 0.3]  # 30 % sample dropout: sample_dropout judges it
    est, v = judged(kept, 10.0)
    _, _, dropped = stats.rate_from_periods(np.diff(kept))
    assert v == "pass" and dropped > 0, est


def test_a_wrong_rate_fails() -> None:
    rng = np.random.default_rng(2)
    t = np.arange(100) / 9.33 + 1e-3 * rng.standard_normal(100)  # 9.33 Hz with 1 ms jitter
    est, v = judged(np.round(t * 1e9).astype(np.int64), 10.0)
    assert v == "fail", est
    half = np.round(np.arange(50) * 2e8).astype(np.int64)  # 5 Hz is not 10 Hz with drops
    assert judged(half, 10.0)[1] == "fail"


def test_interval_covers_the_true_rate_under_jitter_and_dropout() -> None:
    seeds, misses = 200, 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        t = np.arange(120) / 10.0 + 2e-3 * rng.standard_normal(120)
        t = t[rng.random(120) > 0.1]
        est, jitter, _ = stats.rate_from_periods(np.diff(np.round(np.sort(t) * 1e9)))
        misses += not est.ci[0] <= 10.0 <= est.ci[1]
        assert 1e-3 < jitter < 4e-3  # the 2 ms stamp jitter, recovered roughly
    assert misses <= binom.ppf(0.999, seeds, 0.05)  # a 95 % interval (it is conservative)
