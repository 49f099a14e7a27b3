"""Chance that the verifier's interval for one metric lies wholly inside its band (a PASS),
for a sensor that conforms exactly, as a function of the sample count; and the smallest count
that reaches a stated power.

Each function mirrors one interval of verify/stats.py (or accumulator.py), so a plan and a
verdict agree:

- `mean_t`: stats.mean_ci (Student t; the normal quantile with a known extra variance of the
  mean, as for an IMU bias walk). PASS iff |mean - mu| <= h - half; the mean and the sample
  std of normal data are independent, so P = E_W[2 Phi((h - half(W)) sqrt(n) / sigma) - 1]
  over W ~ chi2(n - 1), integrated on QUAD chi-square quantiles.
- `chi2_scale`: every interval that inverts a chi-square law for a variance-like quantity
  (stats.std_ci, std_from_pair_differences, rmse_interval with Satterthwaite degrees of
  freedom, allan_walk). With SS = V W, W ~ chi2(nu), the interval on V is [SS / c_hi,
  SS / c_lo]; it lies inside [A, B] iff A c_hi / V <= W <= B c_lo / V: closed form.
- `wilson`: stats.wilson over k ~ Bin(n, p): exact, summing the binomial over the k whose
  interval lies inside the band.
- `order_stat`: accumulator.quantile_estimate (order-statistic interval of a quantile):
  exact over the multinomial counts below and above the band.

`needed` searches the smallest count with power >= target on a geometric grid, then bisects;
a power that never reaches the target (a plateau, or one that falls again, as a bias mean
whose walk variance grows with the run) gives None with the best power seen.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import special

from simconform.verify import distributions as dist

QUAD = 256  # chi-square quantiles integrated over in mean_t
N_CAP = 10**9  # samples: beyond this a metric is reported as not becoming conclusive
GROWTH = 1.25  # the geometric grid of `needed`


def _z(level: float) -> float:
    return float(special.ndtri(0.5 + level / 2))


def mean_t(
    n: float, sigma: float, h: float, level: float, extra: float = 0.0, extra_true: float = 0.0
) -> float:
    """P(the level interval of a mean of n normal samples (sd sigma) lies within mu +- h).

    `extra`: the known variance added to the mean's (stats.mean_ci extra_var_of_mean: normal
    quantile); `extra_true`: the mean's actual extra variance (a walk's), when it differs."""
    n = int(n)
    if n < 2 or h <= 0:
        return 0.0
    if sigma == 0 and extra == 0 and extra_true == 0:
        return 1.0
    if extra > 0 or extra_true > 0:
        half = _z(level) * math.sqrt(sigma**2 / n + extra)
        sd = math.sqrt(sigma**2 / n + extra_true)
        return (
            max(0.0, 2 * float(dist.norm_cdf((h - half) / sd)) - 1) if sd > 0 else float(half <= h)
        )
    nu = n - 1
    t = float(special.stdtrit(nu, 0.5 + level / 2))
    w = special.chdtri(nu, 1 - (np.arange(QUAD) + 0.5) / QUAD)  # chi2(nu) quantiles
    s = sigma * np.sqrt(w / nu)
    root_n = math.sqrt(n)
    g = 2 * special.ndtr((h - t * s / root_n) * root_n / sigma) - 1
    return float(np.clip(g, 0.0, 1.0).mean())


def chi2_scale(nu: float, v: float, a: float, b: float, level: float) -> float:
    """P(the chi-square interval [V W / c_hi, V W / c_lo], W ~ chi2(nu), lies in [a, b])."""
    if nu < 1:
        return 0.0
    if v <= 0:
        return float(a <= 0 <= b)
    al = 1 - level
    c_hi = float(special.chdtri(nu, al / 2))  # the chi2(nu) quantile at 1 - al / 2
    c_lo = float(special.chdtri(nu, 1 - al / 2))
    lo_w, hi_w = max(a, 0.0) * c_hi / v, b * c_lo / v
    if hi_w <= lo_w:
        return 0.0
    return float(special.chdtr(nu, hi_w) - special.chdtr(nu, lo_w))


def wilson_bounds(k: np.ndarray, n: int, level: float) -> tuple[np.ndarray, np.ndarray]:
    """stats.wilson's interval for every k at once (same formula, same exact ends)."""
    z = _z(level)
    p = k / n
    z2n = z * z / n
    centre = (p + z2n / 2) / (1 + z2n)
    half = z / (1 + z2n) * np.sqrt(p * (1 - p) / n + z2n / (4 * n))
    lo = np.where(k == 0, 0.0, np.maximum(centre - half, 0.0))
    hi = np.where(k == n, 1.0, np.minimum(centre + half, 1.0))
    return lo, hi


def wilson(n: float, p: float, lo: float, hi: float, level: float) -> float:
    """P(stats.wilson(k, n) lies in [lo, hi]) for k ~ Bin(n, p)."""
    n = int(n)
    if n < 1:
        return 0.0
    if p <= 0 or p >= 1:
        k = np.array([0 if p <= 0 else n])
        ks = k
    else:
        sd = math.sqrt(n * p * (1 - p))
        k0 = max(0, int(n * p - 12 * sd - 2))
        k1 = min(n, int(n * p + 12 * sd + 2))
        ks = np.arange(k0, k1 + 1)
    wl, wh = wilson_bounds(ks.astype(float), n, level)
    eps = 1e-12 * max(abs(lo), abs(hi), 1e-300)
    inside = (wl >= lo - eps) & (wh <= hi + eps)
    if p <= 0 or p >= 1:
        return float(inside[0])
    return float(dist.binom_pmf(ks[inside], n, p).sum())


def order_stat(n: float, q: float, f_lo: float, f_hi: float, level: float) -> float:
    """P(the order-statistic interval of the q-quantile of n samples lies in [L, U]), where
    f_lo = P(X < L) and f_hi = P(X > U) for one sample (accumulator.quantile_estimate)."""
    n = int(n)
    if n < 2:
        return 0.0
    a = (1 - level) / 2
    lo_i = int(max(dist.binom_ppf(a, n, q) - 1, 0))
    hi_i = int(min(dist.binom_ppf(1 - a, n, q), n - 1))
    # PASS iff s[lo_i] >= L (at most lo_i samples below L) and s[hi_i] <= U (at most
    # n - 1 - hi_i samples above U); the counts below and above are multinomial
    if f_lo <= 0 and f_hi <= 0:
        return 1.0
    i = np.arange(0, lo_i + 1)
    p_i = dist.binom_pmf(i, n, f_lo) if f_lo > 0 else (i == 0).astype(float)
    rest = 1 - f_lo
    cond = f_hi / rest if rest > 0 else 0.0
    above = dist.binom_cdf(n - 1 - hi_i, n - i, cond) if cond > 0 else np.ones_like(p_i)
    return float(np.clip((p_i * above).sum(), 0.0, 1.0))


@dataclass(frozen=True)
class Need:
    """The smallest count reaching the power and the power there; None: no count up to N_CAP
    does, with the best power seen."""

    n: int | None
    power: float


def needed(power_of: Callable[[int], float], target: float, n_min: int = 2) -> Need:
    """Smallest n >= n_min with power_of(n) >= target: a geometric grid, then bisection
    between the last grid point below the target and the first at or above it."""
    n, prev, best = n_min, None, 0.0
    while n <= N_CAP:
        p = power_of(n)
        best = max(best, p)
        if p >= target:
            break
        prev = n
        n = max(n + 1, int(n * GROWTH))
    else:
        return Need(None, best)
    if prev is None:
        return Need(n, p)
    lo, hi = prev, n  # power(lo) < target <= power(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if power_of(mid) >= target:
            hi = mid
        else:
            lo = mid
    return Need(hi, power_of(hi))
