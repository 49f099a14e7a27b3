"""What each metric should measure (from the spec) and the band it must fall in (tolerances)."""

from __future__ import annotations

import numpy as np

from simconform.spec import Latency, Tolerances
from simconform.verify.distributions import truncnorm_ppf

# `floor`: the resolution of the published values (float32 points, ENU from float64 degrees,
# float64 elsewhere; verify/accumulator.py). No band is narrower, so a sensor configured without
# noise (sigma 0) is judged exact to what its messages can hold, not failed by their round-off.


def sigma_band(sigma: float, tol: Tolerances, floor: float = 0.0) -> tuple[float, float]:
    return relative_band(sigma, tol.sigma_rel, floor)


def bias_band(
    bias: float, sigma: float, tol: Tolerances, floor: float = 0.0
) -> tuple[float, float]:
    half = tol.bias_abs if tol.bias_abs is not None else tol.bias_sigma_rel * sigma
    half = max(half, floor, 1e-12 * max(1.0, abs(bias)))  # never narrower than the round-off
    return (bias - half, bias + half)


LATERAL_FLOOR_M = 1e-4  # float32 points at 100 m round by ~4e-6 m: well below this


def lateral_band(sigma: float, tol: Tolerances) -> tuple[float, float]:
    """RMS of a lidar point's displacement across its true ray: ~0 for a conforming sensor
    (range noise moves a point along its ray). The spec has no angular noise, so it gets the
    systematic error the spec allows along the ray, the bias band's half-width (`bias_abs`, or
    bias_sigma_rel x sigma), with a 0.1 mm floor for a noise-free spec."""
    half = tol.bias_abs if tol.bias_abs is not None else tol.bias_sigma_rel * sigma
    return (0.0, max(half, LATERAL_FLOOR_M))


def relative_band(value: float, rel: float, floor: float = 0.0) -> tuple[float, float]:
    """value +- rel x value, and never less than +- floor (not below 0: a spread or an RMS)."""
    half = max(rel * value, floor)
    return (max(value - half, 0.0) if floor else value - half, value + half)


def dropout_band(p: float, tol: Tolerances) -> tuple[float, float]:
    return (max(0.0, p - tol.dropout_abs), min(1.0, p + tol.dropout_abs))


def latency_band(expected_ms: float, tol: Tolerances) -> tuple[float, float]:
    half = max(tol.latency_rel * expected_ms, tol.latency_abs_ms)
    return (expected_ms - half, expected_ms + half)


def latency_quantile_ms(lat: Latency, q: float) -> float:
    """Quantile of fixed + N(0, jitter) truncated to +-k jitter, in ms."""
    if lat.jitter_ms == 0:
        return lat.fixed_ms
    k = lat.jitter_truncation
    return float(lat.fixed_ms + lat.jitter_ms * truncnorm_ppf(q, k))


def latency_max_ms(lat: Latency) -> float:
    return lat.fixed_ms + lat.jitter_ms * lat.jitter_truncation


def expected_rate(rate_hz: float, sample_dropout: float) -> float:
    return rate_hz * (1.0 - sample_dropout)


def rmse_expected(bias: float, sigma: float, walk: float = 0.0, duration_s: float = 0.0) -> float:
    """RMS error expected from bias, white sigma and a walk averaged over the run (w^2 ~ t)."""
    return float(np.sqrt(bias**2 + sigma**2 + walk**2 * duration_s / 2.0))
