"""Fixed-memory accumulators for long error series, and robust statistics beside mean/std.

A 1000 s lidar run publishes ~10^9 range errors; keeping them all (as the verifier once did)
makes verification memory grow with the run. These accumulators hold what the metrics need in
memory that does not grow with the run:

- `Moments`: power sums 1..4 about a fixed shift (the configured bias), from which mean, std,
  RMS and their intervals, skewness and kurtosis follow exactly (float64; the shift keeps the
  sums about the data's own scale, so no digits cancel unless the bias is off by ~10^6 sigma).
- `Histogram`: counts on a fine fixed grid of width `scale / BINS_PER_SCALE` over +-`SPAN`
  scales around the shift (scale = the configured sigma), with the count and squared
  deviation of what falls outside. Median, MAD, trimmed std and the outlier fraction come
  from it to within one bin (the stated resolution); per-ring and per-sector histograms are
  rows of one 2-D array at a coarser grid.
- `Reservoir`: an evenly spread, decimated sample of bounded size, for the normality test and
  the error plots.

Outliers are errors farther than K_OUTLIER robust sigmas (1.4826 MAD) from the median: a
normal series has 2 Phi(-4) = 6.3e-5 of them.
"""

from __future__ import annotations

import math

import numpy as np

from simconform.verify import distributions as dist
from simconform.verify import stats

K_OUTLIER = 4.0
MAD_TO_SIGMA = 1.4826  # 1 / Phi^-1(3/4): MAD of a normal is 0.6745 sigma
TRIM = 0.05  # trimmed std: 2.5 % cut from each tail
BINS_PER_SCALE = 64  # the global histogram's resolution: sigma / 64
SPAN = 64.0  # ... over +-64 sigma around the configured bias
GROUP_BINS_PER_SCALE = 8  # per ring / sector: sigma / 8 over +-32 sigma
GROUP_SPAN = 32.0
SAMPLE = 200_000


def _trim_factor(trim: float = TRIM) -> float:
    """std of a normal with trim/2 cut from each tail, in sigmas (0.9335 at 5 %)."""
    z = float(dist.norm_ppf(1 - trim / 2))
    return dist.truncnorm_std(z)


TRIM_FACTOR = _trim_factor()


class Moments:
    """Count and power sums 1..4 of y = x - shift."""

    def __init__(self, shift: float = 0.0) -> None:
        self.shift = float(shift)
        self.n = 0
        self.s = np.zeros(4)

    def add(self, x: np.ndarray) -> None:
        y = np.asarray(x, dtype=np.float64).ravel() - self.shift
        if y.size == 0:
            return
        y2 = y * y
        self.n += y.size
        self.s += (y.sum(), y2.sum(), (y2 * y).sum(), (y2 * y2).sum())

    def _central(self) -> tuple[float, float, float, float]:
        """(mean of y, m2, m3, m4): central moments (population) of y."""
        n = self.n
        a1, a2, a3, a4 = self.s / n
        m2 = max(a2 - a1 * a1, 0.0)
        m3 = a3 - 3 * a1 * a2 + 2 * a1**3
        m4 = a4 - 4 * a1 * a3 + 6 * a1 * a1 * a2 - 3 * a1**4
        return a1, m2, m3, m4

    def mean_ci(self, level: float, extra_var_of_mean: float = 0.0) -> stats.Estimate:
        """As stats.mean_ci on the series."""
        n = self.n
        if n < 2:
            return stats.Estimate(math.nan, (math.nan, math.nan), n, level)
        a1, m2, _, _ = self._central()
        var = m2 * n / (n - 1)
        mean = self.shift + a1
        if extra_var_of_mean > 0:
            half = float(dist.norm_ppf(0.5 + level / 2)) * math.sqrt(var / n + extra_var_of_mean)
        else:
            half = float(dist.t_ppf(0.5 + level / 2, n - 1)) * math.sqrt(var / n)
        return stats.Estimate(mean, (mean - half, mean + half), n, level)

    def std_ci(self, level: float) -> stats.Estimate:
        """As stats.std_ci (chi-square interval)."""
        n = self.n
        if n < 2:
            return stats.Estimate(math.nan, (math.nan, math.nan), n, level)
        _, m2, _, _ = self._central()
        ss = m2 * n
        a = 1 - level
        lo = ss / float(dist.chi2_ppf(1 - a / 2, n - 1))
        hi = ss / float(dist.chi2_ppf(a / 2, n - 1))
        return stats.Estimate(math.sqrt(ss / (n - 1)), (math.sqrt(lo), math.sqrt(hi)), n, level)

    def rmse_ci(self, level: float) -> stats.Estimate:
        """As stats.rmse_ci (stats.rmse_interval), x = y + shift."""
        n = self.n
        if n < 2:
            return stats.Estimate(math.nan, (math.nan, math.nan), n, level)
        c = self.shift
        s1, s2, s3, s4 = self.s
        sum_x2 = s2 + 2 * c * s1 + n * c * c
        sum_x4 = s4 + 4 * c * s3 + 6 * c * c * s2 + 4 * c**3 * s1 + n * c**4
        mean_sq = sum_x2 / n
        var_sq = max(sum_x4 - n * mean_sq * mean_sq, 0.0) / (n - 1)
        return stats.rmse_interval(mean_sq, var_sq, n, level)

    def shape(self) -> tuple[float, float]:
        """(skewness, excess kurtosis); NaN for fewer than 4 samples or no spread."""
        if self.n < 4:
            return math.nan, math.nan
        return stats.shape(self.n, *self._central()[1:])


class Histogram:
    """Counts of x on a fixed grid around `centre` (rows: groups), plus what lies outside."""

    def __init__(
        self,
        centre: float,
        scale: float,
        groups: int = 1,
        per_scale: int = BINS_PER_SCALE,
        span: float = SPAN,
    ) -> None:
        self.centre = float(centre)
        self.width = float(scale) / per_scale
        self.bins = int(2 * span * per_scale)
        self.counts = np.zeros((groups, self.bins), dtype=np.int64)
        self.outside = np.zeros(groups, dtype=np.int64)
        self.below = np.zeros(groups, dtype=np.int64)  # of those outside, the ones below it
        self.outside_sq = np.zeros(groups)  # sum of (x - centre)^2 of those outside the grid

    def add(self, x: np.ndarray, group: np.ndarray | None = None) -> None:
        x = np.ascontiguousarray(x, dtype=np.float64).ravel()
        g = np.zeros(x.size, dtype=np.int64) if group is None else np.asarray(group).ravel()
        if g.shape != x.shape:
            raise ValueError(f"{g.size} groups for {x.size} values")
        from simconform.verify.sums import hist_add  # numba only where data is added

        hist_add(
            x, np.ascontiguousarray(g, dtype=np.int64), self.centre, self.width, self.bins,
            self.counts, self.outside, self.below, self.outside_sq,
        )  # fmt: skip

    def centres(self) -> np.ndarray:
        return self.centre + (np.arange(self.bins) + 0.5 - self.bins / 2) * self.width

    def total(self, group: int | None = None) -> int:
        if group is None:
            return int(self.counts.sum() + self.outside.sum())
        return int(self.counts[group].sum() + self.outside[group])

    def row(self, group: int | None = None) -> np.ndarray:
        return self.counts.sum(axis=0) if group is None else self.counts[group]


def _quantile_at_rank(counts: np.ndarray, centres: np.ndarray, rank: float) -> float:
    """Value of the 0-based `rank` (linear inside a bin); NaN if it falls outside the grid."""
    cum = np.cumsum(counts)
    i = int(np.searchsorted(cum, rank, side="right"))
    if i >= len(counts) or counts[i] == 0:
        return math.nan
    before = cum[i] - counts[i]
    w = centres[1] - centres[0] if len(centres) > 1 else 0.0
    return float(centres[i] - w / 2 + w * (rank - before + 0.5) / counts[i])


def robust_summary(h: Histogram, level: float, group: int | None = None) -> dict:
    """Median (with its order-statistic CI), robust sigma 1.4826 MAD, TRIM-trimmed std (scaled
    to a normal's sigma), and the share of errors beyond K_OUTLIER robust sigmas with the share
    of the squared error (about the median) they carry. Resolution: one bin of `h`. Errors
    outside the grid count as outliers; when they hold the median, it is None."""
    counts = h.row(group).astype(np.float64)
    n_in = float(counts.sum())
    out_n = float(h.outside.sum() if group is None else h.outside[group])
    n = n_in + out_n
    res = {"n": int(n), "resolution": h.width}
    if n < 2:
        return res | {"median": None}
    if n_in == 0:
        return res | {"median": None, "outside_grid": int(out_n)}
    c = h.centres()
    low = float(h.below.sum() if group is None else h.below[group])
    a = (1 - level) / 2
    lo_r = max(dist.binom_ppf(a, n, 0.5) - 1, 0) - low
    hi_r = min(dist.binom_ppf(1 - a, n, 0.5), n - 1) - low
    med = _quantile_at_rank(counts, c, (n - 1) / 2 - low)
    if math.isnan(med):
        return res | {"median": None, "outside_grid": int(out_n)}
    ci = (_quantile_at_rank(counts, c, lo_r), _quantile_at_rank(counts, c, hi_r))
    dev = np.abs(c - med)
    order = np.argsort(dev, kind="stable")
    cum = np.cumsum(counts[order])
    k = int(np.searchsorted(cum, (n - 1) / 2, side="right"))
    mad = float(dev[order][min(k, len(order) - 1)]) if k < len(order) else math.nan
    sigma_r = MAD_TO_SIGMA * mad
    # trimmed: the middle 1 - TRIM of the mass
    cdf = np.cumsum(counts) + low
    mid = (cdf - counts / 2 >= TRIM / 2 * n) & (cdf - counts / 2 <= (1 - TRIM / 2) * n)
    w = counts * mid
    trimmed = math.nan
    if w.sum() > 1:
        m = float((w * c).sum() / w.sum())
        trimmed = math.sqrt(float((w * (c - m) ** 2).sum() / w.sum())) / TRIM_FACTOR
    res.update(
        median=med,
        median_ci=[
            ci[0] if math.isfinite(ci[0]) else None,
            ci[1] if math.isfinite(ci[1]) else None,
        ],
        robust_sigma=sigma_r,
        trimmed_sigma=trimmed,
        trim=TRIM,
    )
    if sigma_r > 0:
        far = dev > K_OUTLIER * sigma_r
        n_out = float(counts[far].sum()) + out_n
        sq = (counts * (c - med) ** 2).sum()
        out_sq = float((counts[far] * (c[far] - med) ** 2).sum())
        osq = float(h.outside_sq.sum() if group is None else h.outside_sq[group])
        res.update(
            k_outlier=K_OUTLIER,
            outliers=int(n_out),
            outlier_fraction=n_out / n,
            outlier_share_of_sq=(out_sq + osq) / (sq + osq) if sq + osq > 0 else None,
            normal_outlier_fraction=float(2 * dist.norm_sf(K_OUTLIER)),
        )
    return res


def robust_of_array(x: np.ndarray, scale: float, level: float, centre: float = 0.0) -> dict:
    """robust_summary of an in-memory series (IMU, GNSS, odometry axes)."""
    x = np.asarray(x, dtype=np.float64).ravel()
    sd = float(np.std(x)) if x.size > 1 else 0.0
    s = scale if scale > 0 else (sd if sd > 0 else 1e-9)
    h = Histogram(centre, s)
    h.add(x)
    # the shape in two passes about the mean: one-pass power sums about a far centre lose a
    # spread that is small beside it (x = [0, 0, 0, 1.2e-7] about 1: skewness 0, not 1.15)
    d = x - x.mean() if x.size else x
    m2, m3, m4 = (float(np.mean(d**k)) for k in (2, 3, 4)) if x.size else (0.0, 0.0, 0.0)
    skew, kurt = stats.shape(x.size, m2, m3, m4)
    return robust_summary(h, level) | {"skewness": skew, "excess_kurtosis": kurt}


class Reservoir:
    """An evenly spread sample of at most `size` values (every stride-th, stride doubling)."""

    def __init__(self, size: int = SAMPLE) -> None:
        self.size = size
        self.parts: list[np.ndarray] = []
        self.kept = 0
        self.stride = 1

    def add(self, x: np.ndarray) -> None:
        # a copy: a strided view would keep the whole sweep it was taken from alive
        part = np.asarray(x).ravel()[:: self.stride].copy()
        self.parts.append(part)
        self.kept += part.size
        if self.kept > self.size:
            joined = np.concatenate(self.parts)[::2]
            self.parts, self.kept, self.stride = [joined], joined.size, self.stride * 2

    def values(self) -> np.ndarray:
        return np.concatenate(self.parts) if self.parts else np.zeros(0)


def outliers_by_group(h: Histogram, median: float, sigma_r: float) -> np.ndarray:
    """Per row of `h`: the share beyond K_OUTLIER * sigma_r of `median` (the global robust
    centre and spread, so groups compare on one yardstick); outside the grid counts as beyond.
    Resolution: one bin of `h`."""
    far = np.abs(h.centres() - median) > K_OUTLIER * sigma_r
    n = h.counts.sum(axis=1) + h.outside
    k = h.counts[:, far].sum(axis=1) + h.outside
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, k / np.maximum(n, 1), np.nan)
