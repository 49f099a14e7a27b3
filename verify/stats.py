"""Point estimators with confidence intervals, and the verdict rule built on them.

Every metric in a report is a claim about a sensor's *true* error model made from a finite
sample, so each estimator returns an interval at a stated level and `verdict` decides from the
interval, not the point value: a metric passes only when the data show it is within tolerance.

All functions are pure, take NaN-free float arrays (any shape; flattened, computed in float64)
and are vectorised so that 10^7 samples cost a few passes over memory and no sort. Too little
data gives a NaN value and a (nan, nan) interval, never a warning.

Length: a little over our ~400 lines, because every interval the verifier, compare and the
rate metrics cite lives here beside the one `verdict` rule that reads them: one place to audit
the statistics.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from simconform.verify import distributions as dist

__all__ = [
    "Estimate",
    "allan_walk",
    "anderson_normal",
    "mean_ci",
    "quantile",
    "rate_from_periods",
    "rate_from_stamps",
    "rmse_ci",
    "shape",
    "std_ci",
    "std_from_pair_differences",
    "truncnorm_mean_std",
    "verdict",
    "wilson",
]

_NAN_CI = (math.nan, math.nan)


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its two-sided confidence interval at `level` from `n` samples."""

    value: float
    ci: tuple[float, float]
    n: int
    level: float


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")


def _as_1d(x: ArrayLike) -> np.ndarray:
    # float64 so that float32 sensor data does not lose precision in long sums.
    return np.asarray(x, dtype=np.float64).ravel()


def _nan(n: int, level: float) -> Estimate:
    return Estimate(math.nan, _NAN_CI, n, level)


def _mean_var(x: np.ndarray) -> tuple[float, float]:
    """Mean and ddof=1 variance; centred sum of squares so a large bias cannot cancel digits."""
    mean = float(x.mean())
    d = x - mean
    return mean, float(d @ d) / (x.size - 1)


def _chi2_var_interval(sum_sq: float, dof: int, level: float) -> tuple[float, float]:
    """Interval for a variance from a sum of squares distributed as variance * chi2(dof)."""
    a = 1.0 - level
    return sum_sq / float(dist.chi2_ppf(1.0 - a / 2, dof)), sum_sq / float(
        dist.chi2_ppf(a / 2, dof)
    )


def mean_ci(x: ArrayLike, level: float = 0.95, extra_var_of_mean: float = 0.0) -> Estimate:
    """Mean with a Student t interval.

    `extra_var_of_mean` is a known variance added to that of the mean, for when the mean itself
    is random (an IMU bias random walk gives var(mean) ~ sigma_w^2 T / 3). The sum is then no
    longer a scaled chi-square, so the interval uses the normal quantile on
    sqrt(s^2/n + extra).
    """
    _check_level(level)
    if extra_var_of_mean < 0 or not math.isfinite(extra_var_of_mean):
        raise ValueError(f"extra_var_of_mean must be finite and >= 0, got {extra_var_of_mean!r}")
    x = _as_1d(x)
    n = x.size
    if n < 2:
        return _nan(n, level)
    mean, var = _mean_var(x)
    if extra_var_of_mean > 0:
        q = float(dist.norm_ppf(0.5 + level / 2))
        half = q * math.sqrt(var / n + extra_var_of_mean)
    else:
        q = float(dist.t_ppf(0.5 + level / 2, n - 1))
        half = q * math.sqrt(var / n)
    return Estimate(mean, (mean - half, mean + half), n, level)


def std_ci(x: ArrayLike, level: float = 0.95) -> Estimate:
    """Sample standard deviation (ddof=1) with the exact chi-square interval for sigma."""
    _check_level(level)
    x = _as_1d(x)
    n = x.size
    if n < 2:
        return _nan(n, level)
    _, var = _mean_var(x)
    lo, hi = _chi2_var_interval(var * (n - 1), n - 1, level)
    return Estimate(math.sqrt(var), (math.sqrt(lo), math.sqrt(hi)), n, level)


def std_from_pair_differences(
    x: ArrayLike, level: float = 0.95, walk_var_per_step: float = 0.0
) -> Estimate:
    """White-noise sigma that a constant bias or slow random walk cannot inflate.

    Differences of non-overlapping neighbour pairs, d_j = x[2j+1] - x[2j], are independent with
    mean ~0 and var(d) = 2 sigma^2 + walk_var_per_step. mean(d^2) about the known zero mean
    gives a chi-square interval with one degree of freedom per pair, mapped through
    sigma = sqrt((v - walk_var_per_step) / 2) clipped at 0. `n` counts the samples used (2m).
    """
    _check_level(level)
    if walk_var_per_step < 0 or not math.isfinite(walk_var_per_step):
        raise ValueError(f"walk_var_per_step must be finite and >= 0, got {walk_var_per_step!r}")
    x = _as_1d(x)
    m = x.size // 2
    if m < 1:
        return _nan(x.size, level)
    d = x[1 : 2 * m : 2] - x[0 : 2 * m : 2]
    sum_sq = float(d @ d)
    lo, hi = _chi2_var_interval(sum_sq, m, level)

    def to_sigma(v: float) -> float:
        return math.sqrt(max(v - walk_var_per_step, 0.0) / 2.0)

    return Estimate(to_sigma(sum_sq / m), (to_sigma(lo), to_sigma(hi)), 2 * m, level)


def rmse_ci(x: ArrayLike, level: float = 0.95) -> Estimate:
    """Root mean square sqrt(mean(x^2)) of errors, bias and spread together (rmse_interval)."""
    _check_level(level)
    x = _as_1d(x)
    n = x.size
    if n < 2:
        return _nan(n, level)
    mean_sq, var_sq = _mean_var(x * x)
    return rmse_interval(mean_sq, var_sq, n, level)


def rmse_interval(mean_sq: float, var_sq: float, n: int, level: float) -> Estimate:
    """RMS from mean(x^2) and the sample variance of x^2 over n errors.

    mean(x^2) is taken as theta * chi2(nu) / nu with nu matched to its variance
    (Satterthwaite: nu = 2 n mean^2 / var), so the interval is exact for zero-mean Gaussian
    errors (nu = n) and follows the skew of x^2 otherwise. The CLT (t) interval on mean(x^2)
    it replaces was too narrow on short series: a conforming 28-sample GNSS axis FAILed at
    p = 4e-6 where the chi-square law gives 4e-4 (docs/verification.md).
    """
    mean_sq = max(mean_sq, 0.0)  # summed from moments: -1e-320 where errors are ~1e-80
    rms = math.sqrt(mean_sq)
    if var_sq <= 0.0 or mean_sq <= 0.0:
        return Estimate(rms, (rms, rms), n, level)
    nu = min(2.0 * n * (mean_sq / math.sqrt(var_sq)) ** 2, 1e12)  # no mean_sq^2 to underflow
    a = 1 - level
    with np.errstate(divide="ignore"):
        lo = nu * mean_sq / float(dist.chi2_ppf(1 - a / 2, nu))
        hi = nu * mean_sq / float(dist.chi2_ppf(a / 2, nu))
    if not (math.isfinite(lo) and math.isfinite(hi)):
        # errors near float64's underflow (~1e-80: x^4 is subnormal) leave nu meaningless;
        # the CLT interval on mean(x^2) still bounds them
        half = float(dist.norm_ppf(1 - a / 2)) * math.sqrt(var_sq / n)
        lo, hi = max(mean_sq - half, 0.0), mean_sq + half
    return Estimate(rms, (math.sqrt(lo), math.sqrt(hi)), n, level)


def wilson(k: int, n: int, level: float = 0.95) -> Estimate:
    """Proportion k/n with the Wilson score interval.

    Wilson rather than Wald because dropout rates are often near 0, where the Wald interval
    collapses to a point at k = 0. n = 0 gives NaN (one trial is already a valid sample).
    """
    _check_level(level)
    if n < 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k!r}, n={n!r}")
    if n == 0:
        return _nan(0, level)
    z = float(dist.norm_ppf(0.5 + level / 2))
    p = k / n
    z2n = z * z / n
    centre = (p + z2n / 2) / (1 + z2n)
    half = z / (1 + z2n) * math.sqrt(p * (1 - p) / n + z2n / (4 * n))
    lo = 0.0 if k == 0 else max(centre - half, 0.0)  # exact ends: no 1e-19 rounding residue
    hi = 1.0 if k == n else min(centre + half, 1.0)
    return Estimate(p, (lo, hi), n, level)


def quantile(x: ArrayLike, q: float) -> float:
    """The q-quantile (linear interpolation); uses a partition, not a full sort. Empty -> NaN."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"q must be in [0, 1], got {q!r}")
    x = _as_1d(x)
    if x.size == 0:
        return math.nan
    return float(np.quantile(x, q))


def rate_from_stamps(stamps_ns: np.ndarray, level: float = 0.95) -> Estimate:
    """Achieved publish rate (n-1)/T in Hz from integer-nanosecond stamps.

    The interval is the t interval on the mean inter-arrival time, mapped through 1/x, so
    dropouts (which make gaps of whole periods) widen it and exactly periodic stamps collapse it
    to the value. An upper end of inf means the data cannot bound the rate. n < 3 -> NaN.
    """
    _check_level(level)
    # Differences in integer ns are exact; only then convert to seconds.
    s = np.asarray(stamps_ns).ravel().astype(np.int64, copy=False)
    n = s.size
    if n < 3:
        return _nan(n, level)
    dt = np.diff(s).astype(np.float64) * 1e-9
    mean_dt = float(s[-1] - s[0]) * 1e-9 / (n - 1)
    if mean_dt <= 0:
        raise ValueError("stamps must span a positive time")
    d = dt - mean_dt
    var = float(d @ d) / (n - 2)
    half = float(dist.t_ppf(0.5 + level / 2, n - 2)) * math.sqrt(var / (n - 1))
    lo_dt, hi_dt = mean_dt - half, mean_dt + half
    hi = 1.0 / lo_dt if lo_dt > 0 else math.inf
    return Estimate(1.0 / mean_dt, (1.0 / hi_dt, hi), n, level)


def rate_from_intervals(dt_ns: np.ndarray, level: float = 0.95) -> Estimate:
    """rate_from_stamps over a chosen set of inter-arrival intervals (integer ns): a series with
    gaps gives the intervals on either side of each gap, not the ones across it. m < 2 -> NaN."""
    _check_level(level)
    d_ns = np.asarray(dt_ns).ravel().astype(np.int64, copy=False)
    m = d_ns.size
    if m < 2:
        return _nan(m + 1, level)
    dt = d_ns.astype(np.float64) * 1e-9
    mean_dt = float(d_ns.sum()) * 1e-9 / m
    if mean_dt <= 0:
        raise ValueError("stamps must span a positive time")
    d = dt - mean_dt
    var = float(d @ d) / (m - 1)
    half = float(dist.t_ppf(0.5 + level / 2, m - 1)) * math.sqrt(var / m)
    lo_dt, hi_dt = mean_dt - half, mean_dt + half
    hi = 1.0 / lo_dt if lo_dt > 0 else math.inf
    return Estimate(1.0 / mean_dt, (1.0 / hi_dt, hi), m + 1, level)


GAP_FACTOR = 1.5  # an interval this many times the median interval or more is a dropped sample


def rate_from_periods(
    dt_ns: ArrayLike, level: float = 0.95, resolution_ns: float = 1.0
) -> tuple[Estimate, float, int]:
    """Publish rate from the stamps' period: 1 / median interval, with a CI that never has zero
    width; returns (estimate, jitter in s, intervals left out as dropped samples).

    A rate is a property of the stamps, dropout of the count: intervals of GAP_FACTOR times
    the median interval or more are samples that were dropped (sample_dropout judges those),
    so they are left out and the period is the median of the rest. Its interval is the
    distribution-free order-statistic interval of that median, widened by the stamps'
    resolution on each side (integer-ns stamps of a 30 Hz sensor alternate 33333333 and
    33333334 ns), so exactly periodic stamps give a narrow interval around the true rate rather
    than a point. The jitter is the intervals' robust spread (1.4826 MAD) / sqrt(2): the
    spread of each stamp about its period when stamp errors are independent. Fewer than 2
    intervals -> NaN.
    """
    _check_level(level)
    d = np.asarray(dt_ns).ravel().astype(np.float64)
    d = d[d > 0]
    if d.size < 2:
        return _nan(d.size + 1, level), math.nan, 0
    keep = d[d < GAP_FACTOR * float(np.median(d))]
    left_out = int(d.size - keep.size)
    keep = np.sort(keep)
    m = keep.size
    med = float(np.median(keep))
    a = (1.0 - level) / 2
    lo_i = int(max(dist.binom_ppf(a, m, 0.5) - 1, 0))
    hi_i = int(min(dist.binom_ppf(1 - a, m, 0.5), m - 1))
    p_lo = max(float(keep[lo_i]) - resolution_ns, 0.5 * resolution_ns)
    p_hi = float(keep[hi_i]) + resolution_ns
    jitter = 1.4826 * float(np.median(np.abs(keep - med))) / math.sqrt(2.0) * 1e-9
    est = Estimate(1e9 / med, (1e9 / p_hi, 1e9 / p_lo), m + 1, level)
    return est, jitter, left_out


def allan_walk(
    x: ArrayLike, dt: float, white_sigma: float, level: float = 0.95, min_pairs: int = 8
) -> Estimate:
    """Bias random-walk density sigma_w (units/sqrt(s)) of e_k = b + w_k + n_k sampled every dt.

    w has increments N(0, sigma_w^2 dt) and n is white N(0, white_sigma^2) with white_sigma
    known. Means of blocks of m samples are differenced in non-overlapping adjacent pairs, so
    the differences D_i are independent, zero-mean (b cancels) and
        Var(D) = 2 white_sigma^2 / m + sigma_w^2 dt (2 m^2 + 1) / (3 m)
    (the walk enters D with triangular weights j/m, (2m-j)/m whose squares sum to
    (2m^2+1)/(3m)). m is the largest block giving at least max(min_pairs, 20) pairs (or
    min_pairs when the series is too short for 20), which maximises the walk term against the
    white one. mean(D^2) gets a chi-square interval with one degree of freedom per pair; value
    and ends are mapped by the formula above, clipped at 0. Fewer than min_pairs pairs -> NaN.
    `n` counts the samples used.
    """
    _check_level(level)
    if not dt > 0 or not math.isfinite(dt):
        raise ValueError(f"dt must be finite and > 0, got {dt!r}")
    if white_sigma < 0 or not math.isfinite(white_sigma):
        raise ValueError(f"white_sigma must be finite and >= 0, got {white_sigma!r}")
    if min_pairs < 1:
        raise ValueError(f"min_pairs must be >= 1, got {min_pairs!r}")
    x = _as_1d(x)
    size = x.size
    blocks_pairs = allan_blocks(size, min_pairs)
    if blocks_pairs is None:
        return _nan(size, level)
    m, pairs = blocks_pairs
    used = 2 * pairs * m
    blocks = x[:used].reshape(2 * pairs, m).mean(axis=1)
    d = blocks[1::2] - blocks[0::2]
    sum_sq = float(d @ d)
    lo, hi = _chi2_var_interval(sum_sq, pairs, level)
    white_term, walk_gain = allan_terms(m, dt, white_sigma)

    def to_sigma_w(v: float) -> float:
        return math.sqrt(max(v - white_term, 0.0) / walk_gain)

    return Estimate(to_sigma_w(sum_sq / pairs), (to_sigma_w(lo), to_sigma_w(hi)), used, level)


def allan_blocks(size: int, min_pairs: int = 8) -> tuple[int, int] | None:
    """`allan_walk`'s block size m and pair count on `size` samples (about 20 pairs, at least
    min_pairs); None when too few. The planner (verify/planning.py) uses the same choice."""
    target = max(min_pairs, 20)
    if size // 2 < target:
        target = min_pairs
    if size // 2 < target:
        return None
    m = size // (2 * target)
    return m, size // (2 * m)


def allan_terms(m: int, dt: float, white_sigma: float) -> tuple[float, float]:
    """E[D^2] = white_term + walk_gain sigma_w^2 for block means of m samples every dt."""
    return 2.0 * white_sigma**2 / m, dt * (2.0 * m * m + 1.0) / (3.0 * m)


def shape(n: int, m2: float, m3: float, m4: float) -> tuple[float, float]:
    """(skewness, excess kurtosis) from population central moments 2-4 of n samples; NaN for
    fewer than 4 samples or no spread, including a spread whose powers underflow (~1e-141)."""
    if n < 4 or not m2 * m2 > 0:
        return math.nan, math.nan
    return m3 / m2**1.5, m4 / (m2 * m2) - 3.0


def truncnorm_mean_std(sigma: float, k: float) -> tuple[float, float]:
    """(mean, std) of N(0, sigma^2) clipped to [-k sigma, k sigma] (by resampling, not clamping).

    A noise model that truncates its draws publishes a smaller spread than sigma; this is the
    value the measured std must be compared with.
    """
    if sigma < 0 or not math.isfinite(sigma):
        raise ValueError(f"sigma must be finite and >= 0, got {sigma!r}")
    if not k > 0:
        raise ValueError(f"k must be > 0, got {k!r}")
    if sigma == 0:
        return 0.0, 0.0
    return 0.0, sigma * dist.truncnorm_std(k)


def _anderson_case3_pvalue(a2: float, n: int) -> float:
    """D'Agostino & Stephens (1986, Table 4.9) p-value, normal with mean and variance fitted."""
    a = a2 * (1.0 + 0.75 / n + 2.25 / (n * n))
    if a >= 0.6:
        # The fitted quadratic turns upward past its minimum at a ~ 153; p is ~1e-190 there.
        a = min(a, 5.709 / (2 * 0.0186))
        p = math.exp(1.2937 - 5.709 * a + 0.0186 * a * a)
    elif a >= 0.34:
        p = math.exp(0.9177 - 4.279 * a - 1.38 * a * a)
    elif a >= 0.2:
        p = 1.0 - math.exp(-8.318 + 42.796 * a - 59.938 * a * a)
    else:
        p = 1.0 - math.exp(-13.436 + 101.14 * a - 223.73 * a * a)
    return min(max(p, 0.0), 1.0)


def anderson_normal(x: ArrayLike, max_n: int = 5000, seed: int = 0) -> tuple[float, float]:
    """Anderson-Darling normality test (mean and variance fitted): (A^2, p_value).

    At most `max_n` samples (a seeded random subsample) are tested: with millions of points any
    float32 quantisation is detected, which says nothing about the noise model. The statistic
    is scipy.stats.anderson's (computed in verify/distributions.py); the p-value is the
    continuous D'Agostino & Stephens case-3 formula, because scipy's method='interpolate'
    clips p to its table's range [0.01, 0.15]. Fewer than 2
    samples, or constant data, -> (nan, nan).
    """
    if max_n < 2:
        raise ValueError(f"max_n must be >= 2, got {max_n!r}")
    x = _as_1d(x)
    if x.size > max_n:
        rng = np.random.default_rng(seed)
        x = x[rng.choice(x.size, size=max_n, replace=False)]
    n = x.size
    if n < 2 or float(x.max()) == float(x.min()):
        return math.nan, math.nan
    a2 = dist.anderson_norm_statistic(x)
    return a2, _anderson_case3_pvalue(a2, n)


def verdict(ci: tuple[float, float], tolerance: tuple[float, float]) -> str:
    """Decide from an interval, so a pass means the data show the true value is in tolerance.

    "pass": the whole (closed) CI lies inside the tolerance band; "fail": no overlap at all;
    "inconclusive": overlap without containment (more data needed), or a NaN CI. A relative
    epsilon of 1e-12 of the largest finite magnitude lets a degenerate CI equal to a bound
    count as inside. Tolerance ends may be infinite for one-sided limits.
    """
    t_lo, t_hi = float(tolerance[0]), float(tolerance[1])
    if math.isnan(t_lo) or math.isnan(t_hi) or t_lo > t_hi:
        raise ValueError(f"tolerance must be an ordered pair of numbers, got {tolerance!r}")
    lo, hi = float(ci[0]), float(ci[1])
    if math.isnan(lo) or math.isnan(hi):
        return "inconclusive"
    if lo > hi:
        raise ValueError(f"ci must be ordered, got {ci!r}")
    finite = [abs(v) for v in (lo, hi, t_lo, t_hi) if math.isfinite(v)]
    eps = 1e-12 * max(finite, default=0.0)
    if lo >= t_lo - eps and hi <= t_hi + eps:
        return "pass"
    if hi < t_lo - eps or lo > t_hi + eps:
        return "fail"
    return "inconclusive"
