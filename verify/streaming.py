"""Streaming estimators: what the accumulators keep instead of whole error series, so that
verification holds memory that does not grow with the run (issue 17).

Each structure reproduces a batch computation of verify/stats.py; where exactness would need
the whole series, it is exact up to a stated size and keeps the statistic's law beyond it:

- `Welford`: count, mean and central moments 2..4 (Pebay's update; chunks merge exactly, in
  any order). Mean, std and RMS intervals as stats.mean_ci / std_ci / rmse_ci (float
  rounding aside), skewness and kurtosis.
- `Counts`: exact counts of integer values (latencies and stamp intervals in ns). Quantiles,
  order statistics and MAD equal numpy's on the series while it holds at most CAP distinct
  values; past that, values are grouped on a grid of 2, 4, ... ns and every interval built on
  it is widened by the grid (`resolution`), so it stays conservative. Periodic stamps and
  fixed latencies take a handful of values; a jittered 10 Hz sensor over 1000 s, 10^4.
- `Reservoir`: a uniform random sample of at most `size` values (Algorithm R, seeded;
  SERIES_SAMPLE = 2^17 by default, 1 MiB). Up to `size` values it is the series itself, in
  order, so the Anderson-Darling check (which tests a seeded subsample of 5000 of the series:
  stats.anderson_normal) and the plots are exactly what they were: a 100 Hz IMU axis for up to
  1310 s. Beyond, the 5000 tested are a uniform subsample of a uniform sample, i.e. another
  uniform subsample of the series: the test keeps its law and level, but its p-value is that
  of a different subsample (as with another seed), so a borderline normality verdict of a run
  that long may differ from the one a whole-series copy would give.
- `PairDiffs`: sum of squares of non-overlapping neighbour differences x[2j+1] - x[2j]
  (stats.std_from_pair_differences), exactly, and the white series they give.
- `BlockSums`: sums of blocks of b samples, b doubling to keep at most MAX_BLOCKS, for the
  Allan random-walk estimate (stats.allan_walk). Its block size m (about n / 40) is known only
  at the end; when b divides m it is exact, else it uses the largest multiple of b below m
  (m changes by under 80 / MAX_BLOCKS of itself, 0.25 %), an equally valid choice with its own
  chi-square interval.
- `Reorder`: releases items in stamp order from a log-ordered stream (a sample is logged at
  most `horizon` after its stamp), so order-dependent statistics see the series sorted.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator

import numpy as np

from simconform.verify import distributions as dist
from simconform.verify import stats

CAP = 1 << 14  # distinct values a Counts holds before its grid coarsens (~1.5 MB)
MAX_BLOCKS = 1 << 15  # BlockSums: base blocks kept (256 KiB)
SERIES_SAMPLE = 1 << 17  # a series' reservoir: 1 MiB, the whole series up to 1310 s at 100 Hz


def _nan(n: int, level: float) -> stats.Estimate:
    return stats.Estimate(math.nan, (math.nan, math.nan), n, level)


class Welford:
    """Count, mean and the sums M2, M3, M4 of powers of deviations from the mean."""

    def __init__(self) -> None:
        self.n = 0
        self.mean = 0.0
        self.m2 = self.m3 = self.m4 = 0.0

    def add(self, x) -> None:
        x = np.asarray(x, dtype=np.float64).ravel()
        if x.size == 0:
            return
        other = Welford()
        other.n, other.mean = x.size, float(x.mean())
        d = x - other.mean
        d2 = d * d
        other.m2, other.m3, other.m4 = float(d2.sum()), float((d2 * d).sum()), float(d2 @ d2)
        self.merge(other)

    def merge(self, o: Welford) -> None:
        """Pebay (2008): the moments of the union, exact in any order of merging."""
        if o.n == 0:
            return
        if self.n == 0:
            self.n, self.mean, self.m2, self.m3, self.m4 = o.n, o.mean, o.m2, o.m3, o.m4
            return
        na, nb = self.n, o.n
        n = na + nb
        d = o.mean - self.mean
        dn = d / n
        m2 = self.m2 + o.m2 + d * dn * na * nb
        m3 = (
            self.m3 + o.m3 + d * dn * dn * na * nb * (na - nb) + 3 * dn * (na * o.m2 - nb * self.m2)
        )
        m4 = (
            self.m4
            + o.m4
            + d * dn**3 * na * nb * (na * na - na * nb + nb * nb)
            + 6 * dn * dn * (na * na * o.m2 + nb * nb * self.m2)
            + 4 * dn * (na * o.m3 - nb * self.m3)
        )
        self.n, self.mean, self.m2, self.m3, self.m4 = n, self.mean + nb * dn, m2, m3, m4

    def var(self) -> float:
        return self.m2 / (self.n - 1) if self.n > 1 else math.nan

    def mean_ci(self, level: float, extra_var_of_mean: float = 0.0) -> stats.Estimate:
        """As stats.mean_ci."""
        n = self.n
        if n < 2:
            return _nan(n, level)
        var = self.var()
        if extra_var_of_mean > 0:
            half = float(dist.norm_ppf(0.5 + level / 2)) * math.sqrt(var / n + extra_var_of_mean)
        else:
            half = float(dist.t_ppf(0.5 + level / 2, n - 1)) * math.sqrt(var / n)
        return stats.Estimate(self.mean, (self.mean - half, self.mean + half), n, level)

    def std_ci(self, level: float) -> stats.Estimate:
        """As stats.std_ci (chi-square interval)."""
        n = self.n
        if n < 2:
            return _nan(n, level)
        lo, hi = chi2_var_interval(self.m2, n - 1, level)
        return stats.Estimate(math.sqrt(self.var()), (math.sqrt(lo), math.sqrt(hi)), n, level)

    def rmse_ci(self, level: float) -> stats.Estimate:
        """As stats.rmse_ci: mean(x^2) and the sample variance of x^2 (x = mean + d, so
        var(x^2) = 4 mean^2 m2 + 4 mean m3 + m4 - m2^2 with no large terms to cancel)."""
        n = self.n
        if n < 2:
            return _nan(n, level)
        mu, m2, m3, m4 = self.mean, self.m2 / n, self.m3 / n, self.m4 / n
        pop = 4 * mu * mu * m2 + 4 * mu * m3 + m4 - m2 * m2
        return stats.rmse_interval(mu * mu + m2, max(pop, 0.0) * n / (n - 1), n, level)

    def shape(self) -> tuple[float, float]:
        """(skewness, excess kurtosis), as robust.Moments.shape."""
        n = self.n
        return stats.shape(n, self.m2 / max(n, 1), self.m3 / max(n, 1), self.m4 / max(n, 1))


def chi2_var_interval(sum_sq: float, dof: int, level: float) -> tuple[float, float]:
    """Interval for a variance from a sum of squares distributed as variance * chi2(dof)."""
    a = 1.0 - level
    return sum_sq / float(dist.chi2_ppf(1 - a / 2, dof)), sum_sq / float(dist.chi2_ppf(a / 2, dof))


class Counts:
    """Counts of integer values on a grid of `width` (1 until more than CAP distinct values)."""

    def __init__(self) -> None:
        self.width = 1
        self.counts: dict[int, int] = {}
        self.n = 0
        self.max = -math.inf

    def add(self, v: np.ndarray) -> None:
        v = np.asarray(v, dtype=np.int64).ravel()
        if v.size == 0:
            return
        self.n += v.size
        self.max = max(self.max, int(v.max()))
        keys, c = np.unique(v // self.width, return_counts=True)
        for k, n in zip(keys.tolist(), c.tolist(), strict=True):
            self.counts[k] = self.counts.get(k, 0) + n
        while len(self.counts) > CAP:
            self.width *= 2
            merged: dict[int, int] = {}
            for key, n in self.counts.items():
                merged[key // 2] = merged.get(key // 2, 0) + n
            self.counts = merged

    def table(self) -> tuple[np.ndarray, np.ndarray]:
        """(sorted values, counts): a bin stands at its centre once the grid is coarser than 1."""
        keys = np.array(sorted(self.counts), dtype=np.int64)
        c = np.array([self.counts[int(k)] for k in keys], dtype=np.int64)
        return keys * self.width + (self.width - 1) / 2, c


def order_stat(values: np.ndarray, cum: np.ndarray, k: int) -> float:
    """The k-th smallest (0-based) of a series given as sorted values and cumulative counts."""
    return float(values[int(np.searchsorted(cum, k, side="right"))])


def quantile(values: np.ndarray, counts: np.ndarray, q: float) -> float:
    """np.quantile(series, q) (linear) of the series `values` repeated `counts` times."""
    cum = np.cumsum(counts)
    h = (int(cum[-1]) - 1) * q
    lo = math.floor(h)
    a = order_stat(values, cum, lo)
    if h == lo:
        return a
    return a + (h - lo) * (order_stat(values, cum, lo + 1) - a)


def quantile_ci(
    values: np.ndarray, counts: np.ndarray, q: float, level: float, resolution: float = 0.0
) -> stats.Estimate:
    """accumulator.quantile_estimate on a counted series, the interval widened by `resolution`."""
    n = int(counts.sum())
    if n < 2:
        return _nan(n, level)
    a = (1 - level) / 2
    lo = int(max(dist.binom_ppf(a, n, q) - 1, 0))
    hi = int(min(dist.binom_ppf(1 - a, n, q), n - 1))
    cum = np.cumsum(counts)
    ci = (order_stat(values, cum, lo) - resolution, order_stat(values, cum, hi) + resolution)
    return stats.Estimate(quantile(values, counts, q), ci, n, level)


def rate_from_counts(c: Counts, level: float) -> tuple[stats.Estimate, float, int]:
    """stats.rate_from_periods on counted intervals (ns), widened by the grid's width."""
    values, counts = c.table()
    keep = values > 0
    values, counts = values[keep], counts[keep]
    if counts.sum() < 2:
        return _nan(int(counts.sum()) + 1, level), math.nan, 0
    med_all = quantile(values, counts, 0.5)
    keep = values < stats.GAP_FACTOR * med_all
    left_out = int(counts[~keep].sum())
    values, counts = values[keep], counts[keep]
    m = int(counts.sum())
    med = quantile(values, counts, 0.5)
    a = (1.0 - level) / 2
    cum = np.cumsum(counts)
    lo_i = int(max(dist.binom_ppf(a, m, 0.5) - 1, 0))
    hi_i = int(min(dist.binom_ppf(1 - a, m, 0.5), m - 1))
    res = 1.0 + (c.width - 1) / 2  # the stamps' 1 ns, and half a grid cell beyond exact
    p_lo = max(order_stat(values, cum, lo_i) - res, 0.5 * res)
    p_hi = order_stat(values, cum, hi_i) + res
    dev = np.abs(values - med)
    order = np.argsort(dev, kind="stable")
    mad = quantile(dev[order], counts[order], 0.5)
    jitter = 1.4826 * mad / math.sqrt(2.0) * 1e-9
    return stats.Estimate(1e9 / med, (1e9 / p_hi, 1e9 / p_lo), m + 1, level), jitter, left_out


class Reservoir:
    """A uniform random sample of at most `size` values (Algorithm R; the series itself, in
    order, while it has at most `size`)."""

    def __init__(self, size: int = SERIES_SAMPLE, seed: int = 0) -> None:
        self.size = size
        self.buf = np.empty(size)
        self.seen = 0
        self.rng = np.random.default_rng(seed)

    def add(self, x) -> None:
        x = np.asarray(x, dtype=np.float64).ravel()
        room = min(max(self.size - self.seen, 0), x.size)
        self.buf[self.seen : self.seen + room] = x[:room]
        rest = x[room:]
        if rest.size:
            i = self.seen + room + np.arange(rest.size)  # 0-based index of each value
            j = (self.rng.random(rest.size) * (i + 1)).astype(np.int64)
            for slot, v in zip(j[j < self.size], rest[j < self.size], strict=True):
                self.buf[slot] = v  # in arrival order: a later value may replace an earlier one
        self.seen += x.size

    def values(self) -> np.ndarray:
        """The sample (a view: read it once the series has ended)."""
        return self.buf[: min(self.seen, self.size)]


class PairDiffs:
    """Non-overlapping neighbour differences d_j = x[2j+1] - x[2j] of a stamp-ordered series."""

    def __init__(self, white: Reservoir | None = None) -> None:
        self.pending: float | None = None
        self.pairs = 0
        self.sum_sq = 0.0
        self.white = white  # d / sqrt 2, for the normality check

    def add(self, x: np.ndarray) -> None:
        x = np.asarray(x, dtype=np.float64).ravel()
        if self.pending is not None:
            x = np.concatenate(([self.pending], x))
        k = x.size // 2
        self.pending = float(x[-1]) if x.size % 2 else None
        d = x[1 : 2 * k : 2] - x[0 : 2 * k : 2]
        self.pairs += k
        self.sum_sq += float(d @ d)
        if self.white is not None:
            self.white.add(d / math.sqrt(2.0))

    def std(self, level: float, walk_var_per_step: float = 0.0) -> stats.Estimate:
        """As stats.std_from_pair_differences."""
        m = self.pairs
        if m < 1:
            return _nan(2 * m + (self.pending is not None), level)
        lo, hi = chi2_var_interval(self.sum_sq, m, level)

        def to_sigma(v: float) -> float:
            return math.sqrt(max(v - walk_var_per_step, 0.0) / 2.0)

        return stats.Estimate(to_sigma(self.sum_sq / m), (to_sigma(lo), to_sigma(hi)), 2 * m, level)


class BlockSums:
    """Sums of consecutive blocks of b samples (b doubling to keep at most MAX_BLOCKS)."""

    def __init__(self) -> None:
        self.b = 1
        self.sums = np.zeros(0)
        self.part = 0.0
        self.in_part = 0
        self.n = 0

    def add(self, x: np.ndarray) -> None:
        x = np.asarray(x, dtype=np.float64).ravel()
        self.n += x.size
        t = min(self.b - self.in_part, x.size)
        self.part += float(x[:t].sum())
        self.in_part += t
        x = x[t:]
        if self.in_part < self.b:
            return
        full = x.size // self.b
        new = x[: full * self.b].reshape(full, self.b).sum(axis=1)
        self.sums = np.concatenate((self.sums, [self.part], new))
        rest = x[full * self.b :]
        self.part, self.in_part = float(rest.sum()), rest.size
        while self.sums.size > MAX_BLOCKS:  # coarsen: pairs of blocks become one
            if self.sums.size % 2:  # the odd one out starts the next, unfinished block
                self.part, self.in_part = self.part + self.sums[-1], self.in_part + self.b
                self.sums = self.sums[:-1]
            self.sums = self.sums.reshape(-1, 2).sum(axis=1)
            self.b *= 2

    def allan_walk(
        self, dt: float, white_sigma: float, level: float, min_pairs: int = 8
    ) -> stats.Estimate:
        """As stats.allan_walk, with its block size rounded down to a multiple of b."""
        found = stats.allan_blocks(self.n, min_pairs)
        if found is None:
            return _nan(self.n, level)
        m = max(found[0] // self.b, 1) * self.b
        pairs = self.n // (2 * m)
        if pairs < min_pairs:
            return _nan(self.n, level)
        k = m // self.b
        base = np.asarray(self.sums[: 2 * pairs * k]).reshape(2 * pairs, k)
        blocks = base.sum(axis=1) / m
        d = blocks[1::2] - blocks[0::2]
        sum_sq = float(d @ d)
        lo, hi = chi2_var_interval(sum_sq, pairs, level)
        white_term, walk_gain = stats.allan_terms(m, dt, white_sigma)

        def to_sigma_w(v: float) -> float:
            return math.sqrt(max(v - white_term, 0.0) / walk_gain)

        used = 2 * pairs * m
        return stats.Estimate(
            to_sigma_w(sum_sq / pairs), (to_sigma_w(lo), to_sigma_w(hi)), used, level
        )


class Reorder:
    """Items of a log-ordered stream released in stamp order: a sample is logged at most
    `horizon_ns` after its stamp, so once the log clock passes stamp + horizon nothing earlier
    can come. One that does anyway (a sensor later than its spec allows by more than the
    horizon's slack) is released at once, out of order, and counted in `late` (the
    accumulator leaves it out of the ordered statistics and reports the count on rate_hz)."""

    def __init__(self, horizon_ns: int) -> None:
        self.horizon = int(horizon_ns)
        self.heap: list[tuple[int, int, object]] = []
        self.seq = 0
        self.released = -(1 << 62)
        self.late = 0

    def push(self, stamp: int, log_ns: int, item: object) -> Iterator[tuple[int, object]]:
        if stamp < self.released:
            self.late += 1
            yield stamp, item
        else:
            heapq.heappush(self.heap, (stamp, self.seq, item))
            self.seq += 1
        yield from self._until(log_ns - self.horizon)

    def flush(self) -> Iterator[tuple[int, object]]:
        yield from self._until(1 << 62)

    def _until(self, before: int) -> Iterator[tuple[int, object]]:
        while self.heap and self.heap[0][0] < before:
            stamp, _, item = heapq.heappop(self.heap)
            self.released = stamp
            yield stamp, item
