"""The normal, Student t, chi-square, binomial and truncated-normal functions the verifier uses,
from scipy.special, without importing scipy.stats.

Why not scipy.stats: importing it costs about 20 MB of memory over what the verifier loads
anyway (measured 2026-12-06 beside numpy, scipy.special, scipy.interpolate, numba and pyplot, by a
script outside the repository:
166 -> 185 MB), which put `simconform verify` of a 1,000 s run over issue 17's 300 MB
(docs/verification.md#memory). Each function
is the definition scipy.stats evaluates (scipy 1.17: the `_ppf`, `_cdf`, `_sf` of its
distributions, and `anderson`'s statistic for the normal), so the values agree to the last bit
or to a few ulps; tests/test_distributions.py checks each against scipy.stats with hypothesis.
Two are not scipy's own code: `binom_ppf` searches the smallest k with cdf(k) >= q by bisection
(scipy asks Boost's quantile; they differ only at an exact tie, cdf(k) == q to the last bit, as
the median of an odd count at p = 0.5, where Boost rounds up to k + 1), and `binom_pmf` is
exp(scipy's logpmf) (relative error up to ~1e-7 for n ~ 10^7, where Boost's is ~1e-15), used
only by power predictions (verify/power.py).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike
from scipy import special as sc

__all__ = [
    "anderson_norm_statistic",
    "binom_cdf",
    "binom_pmf",
    "binom_ppf",
    "binom_sf",
    "chi2_ppf",
    "norm_cdf",
    "norm_pdf",
    "norm_ppf",
    "norm_sf",
    "t_ppf",
    "truncnorm_cdf",
    "truncnorm_ppf",
    "truncnorm_std",
]

_NORM_PDF_C = np.sqrt(2 * np.pi)


def norm_ppf(q: ArrayLike) -> np.ndarray:
    """Quantile of N(0, 1) (scipy.stats.norm.ppf)."""
    return sc.ndtri(q)


def norm_cdf(x: ArrayLike) -> np.ndarray:
    """scipy.stats.norm.cdf."""
    return sc.ndtr(x)


def norm_sf(x: ArrayLike) -> np.ndarray:
    """scipy.stats.norm.sf: the upper tail, without 1 - cdf's cancellation."""
    return sc.ndtr(-np.asarray(x, dtype=np.float64))


def norm_pdf(x: ArrayLike, loc: float = 0.0, scale: float = 1.0) -> np.ndarray:
    """scipy.stats.norm.pdf(x, loc, scale)."""
    z = (np.asarray(x, dtype=np.float64) - loc) / scale
    return np.exp(-(z**2) / 2.0) / _NORM_PDF_C / scale


def t_ppf(q: ArrayLike, df: ArrayLike) -> np.ndarray:
    """Quantile of Student's t with df degrees of freedom (scipy.stats.t.ppf)."""
    return sc.stdtrit(df, q)


def chi2_ppf(q: ArrayLike, df: ArrayLike) -> np.ndarray:
    """Quantile of the chi-square law (scipy.stats.chi2.ppf)."""
    return 2 * sc.gammaincinv(np.asarray(df, dtype=np.float64) / 2, q)


def _binom_tail(k: ArrayLike, n: ArrayLike, p: float, beta, below: float, above: float):
    """beta(k + 1, n - k, p) for integer k in [0, n), `below` under it and `above` over it."""
    k = np.floor(np.asarray(k, dtype=np.float64))
    n = np.asarray(n, dtype=np.float64)
    inside = (k >= 0) & (k < n)
    v = beta(np.where(inside, k + 1, 1.0), np.where(inside, n - k, 1.0), p)
    return np.where(k < 0, below, np.where(k >= n, above, v))


def binom_cdf(k: ArrayLike, n: ArrayLike, p: float) -> np.ndarray:
    """P(K <= k) for K ~ Bin(n, p) (scipy.stats.binom.cdf, as Boost: 1 - I_p(k + 1, n - k))."""
    return _binom_tail(k, n, p, sc.betaincc, 0.0, 1.0)


def binom_sf(k: ArrayLike, n: ArrayLike, p: float) -> np.ndarray:
    """P(K > k) for K ~ Bin(n, p) (scipy.stats.binom.sf: I_p(k + 1, n - k))."""
    return _binom_tail(k, n, p, sc.betainc, 1.0, 0.0)


def binom_pmf(k: ArrayLike, n: ArrayLike, p: float) -> np.ndarray:
    """P(K = k) for K ~ Bin(n, p): exp of scipy.stats.binom.logpmf's formula; 0 outside 0..n."""
    k = np.asarray(k, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    inside = (k >= 0) & (k <= n) & (k == np.floor(k))
    kk = np.where(inside, k, 0.0)
    log = (
        sc.gammaln(n + 1)
        - (sc.gammaln(kk + 1) + sc.gammaln(n - kk + 1))
        + sc.xlogy(kk, p)
        + sc.xlog1py(n - kk, -p)
    )
    return np.where(inside, np.exp(log), 0.0)


def binom_ppf(q: float, n: int, p: float) -> float:
    """Smallest k in 0..n with P(K <= k) >= q, K ~ Bin(n, p) (scipy.stats.binom.ppf; -1 at
    q = 0, n at q = 1, NaN outside [0, 1]): a bisection on the cdf, log2(n) evaluations."""
    n = int(n)
    if not 0.0 <= q <= 1.0 or n < 0:
        return math.nan
    if q == 0.0:
        return -1.0
    if q == 1.0:
        return float(n)
    lo, hi = 0, n  # cdf(n) = 1 >= q
    while lo < hi:
        mid = (lo + hi) // 2  # < n: binom_cdf's inner case, on scalars
        if float(sc.betaincc(mid + 1.0, float(n - mid), p)) >= q:
            hi = mid
        else:
            lo = mid + 1
    return float(lo)


def _mass(k: float) -> float:
    """P(|Z| <= k) for Z ~ N(0, 1), accurate for small and large k alike."""
    return float(sc.erf(k / math.sqrt(2.0)))


def truncnorm_std(k: float) -> float:
    """Standard deviation of N(0, 1) truncated to [-k, k] (scipy.stats.truncnorm.std(-k, k)):
    sqrt(1 - 2 k phi(k) / P(|Z| <= k))."""
    if not k > 0:
        raise ValueError(f"k must be > 0, got {k!r}")
    if math.isinf(k):
        return 1.0
    var = 1.0 - 2.0 * k * float(norm_pdf(k)) / _mass(k)
    return math.sqrt(max(var, 0.0))


def truncnorm_cdf(x: float, k: float) -> float:
    """P(Z <= x) for Z ~ N(0, 1) truncated to [-k, k] (scipy.stats.truncnorm.cdf(x, -k, k)),
    from the nearer tail so neither end loses digits."""
    if x <= -k:
        return 0.0
    if x >= k:
        return 1.0
    below_k = float(norm_sf(k))  # P(Z < -k)
    if x <= 0:
        return (float(norm_cdf(x)) - below_k) / _mass(k)
    return 1.0 - (float(norm_sf(x)) - below_k) / _mass(k)


def truncnorm_ppf(q: float, k: float) -> float:
    """Quantile of N(0, 1) truncated to [-k, k] (scipy.stats.truncnorm.ppf(q, -k, k)); the
    upper half by symmetry, so q near 1 keeps its digits."""
    if not 0.0 <= q <= 1.0:
        return math.nan
    if q == 0.0:
        return -k
    if q == 1.0:
        return k
    below_k = float(norm_sf(k))
    if q <= 0.5:
        return float(norm_ppf(below_k + q * _mass(k)))
    return -float(norm_ppf(below_k + (1.0 - q) * _mass(k)))


def anderson_norm_statistic(x: np.ndarray) -> float:
    """Anderson-Darling A^2 of x against a normal with its mean and sample std fitted
    (scipy.stats.anderson(x, 'norm').statistic, the same operations in the same order)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.sort(x)
    n = len(y)
    w = (y - np.mean(x, axis=0)) / np.std(x, ddof=1, axis=0)
    logcdf = sc.log_ndtr(w)
    logsf = sc.log_ndtr(-w)
    i = np.arange(1, n + 1)
    return float(-n - np.sum((2 * i - 1.0) / n * (logcdf + logsf[::-1]), axis=0))
