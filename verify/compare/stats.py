"""The statistics of part 2: one run's errors per capture (Series), the paired bootstrap of
B - A that resamples whole captures, the same resample for both runs, and the KS and
Anderson-Darling two-sample tests."""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np

from simconform.verify.compare.verdicts import json_float

AD_MAX = 5000  # per side, as for the verifier's normality check
KS_MAX = 200_000  # per side


@dataclass
class Series:
    """One error field of one run, per capture: sums the paired bootstrap resamples, plus the
    raw values for the two-sample tests. Values are shifted by `shift` (the configured bias or
    latency, common to both runs) before summing, so a large offset costs no digits in the std."""

    kind: str  # "moments" or "proportion"
    keys: np.ndarray  # capture stamps (int64), sorted
    n: np.ndarray
    s1: np.ndarray
    s2: np.ndarray
    values: np.ndarray = field(default_factory=lambda: np.zeros(0))
    shift: float = 0.0

    @staticmethod
    def of_groups(keys, groups: list[np.ndarray], shift: float, values=None) -> Series:
        order = np.argsort(np.asarray(keys, dtype=np.int64), kind="stable")
        keys = np.asarray(keys, dtype=np.int64)[order]
        groups = [np.asarray(groups[i], dtype=np.float64) - shift for i in order]
        n = np.array([g.size for g in groups], dtype=float)
        s1 = np.array([g.sum() for g in groups], dtype=float)
        s2 = np.array([g @ g for g in groups], dtype=float)
        vals = np.concatenate(groups) + shift if values is None and groups else values
        return Series("moments", keys, n, s1, s2, np.zeros(0) if vals is None else vals, shift)

    @staticmethod
    def proportion(keys, k, n) -> Series:
        order = np.argsort(np.asarray(keys, dtype=np.int64), kind="stable")
        k = np.asarray(k, dtype=float)[order]
        return Series(
            "proportion", np.asarray(keys, np.int64)[order], np.asarray(n, float)[order], k, k
        )


def _stat(kind: str, n, s1, s2, shift: float):
    """Mean / std (ddof 1) / proportion from sums; NaN where undefined. Works on arrays."""
    with np.errstate(invalid="ignore", divide="ignore"):
        if kind == "mean":
            return np.where(n > 0, s1 / n, np.nan) + shift
        if kind == "proportion":
            return np.where(n > 0, s1 / n, np.nan)
        var = np.where(n > 1, (s2 - s1 * s1 / n) / (n - 1), np.nan)
        return np.sqrt(np.maximum(var, 0.0))


def paired_bootstrap(
    a: Series, b: Series, kinds: list[str], level: float, n_boot: int, seed: int
) -> dict[str, tuple[float, float, float, tuple[float, float]]]:
    """Per statistic: (value A, value B, difference B - A, percentile interval of the difference
    at `level`) from resampling the union of captures with replacement, the same resample for
    both runs (captures a run has no data for contribute nothing to it)."""
    keys = np.union1d(a.keys, b.keys)
    cols = []
    for s in (a, b):
        idx = np.searchsorted(keys, s.keys)
        arr = np.zeros((3, keys.size))
        arr[0, idx], arr[1, idx], arr[2, idx] = s.n, s.s1, s.s2
        cols.append(arr)
    tot_a, tot_b = cols[0].sum(1), cols[1].sum(1)
    out_point = {
        k: (float(_stat(k, *tot_a, a.shift)), float(_stat(k, *tot_b, b.shift))) for k in kinds
    }
    rng = np.random.default_rng(seed)
    k_n = keys.size
    boot = {k: [] for k in kinds}
    chunk = max(1, min(n_boot, 1_000_000 // max(k_n, 1)))
    done = 0
    while done < n_boot:
        m = min(chunk, n_boot - done)
        idx = rng.integers(0, k_n, size=(m, k_n))
        ra = cols[0][:, idx].sum(axis=2)
        rb = cols[1][:, idx].sum(axis=2)
        for k in kinds:
            boot[k].append(_stat(k, *rb, b.shift) - _stat(k, *ra, a.shift))
        done += m
    alpha = (1.0 - level) / 2.0
    out = {}
    for k in kinds:
        va, vb = out_point[k]
        d = np.concatenate(boot[k])
        d = d[np.isfinite(d)]
        if d.size < n_boot // 2:
            ci = (math.nan, math.nan)
        else:
            lo, hi = np.quantile(d, [alpha, 1.0 - alpha])
            # a skewed bootstrap can leave the point estimate outside: widen, never narrow
            ci = (float(min(lo, vb - va)), float(max(hi, vb - va)))
        out[k] = (va, vb, vb - va, ci)
    return out


def two_sample(a: np.ndarray, b: np.ndarray, seed: int) -> dict:
    """KS and Anderson-Darling k-sample tests of two error samples (seeded subsamples)."""
    import inspect

    from scipy import stats as sps

    out = {"ks_statistic": None, "ks_p": None, "ad_statistic": None, "ad_p": None}
    if a.size < 2 or b.size < 2:
        return out

    def sub(x: np.ndarray, k: int) -> np.ndarray:
        # a fresh generator per sample: equal samples give equal subsamples
        rng = np.random.default_rng(seed)
        return x if x.size <= k else x[np.sort(rng.choice(x.size, k, replace=False))]

    with warnings.catch_warnings():
        # with tied values scipy's exact p-value fails and it falls back to the asymptotic
        # one, saying so on stderr for every metric; the fallback is the answer we want
        warnings.filterwarnings("ignore", "ks_2samp: Exact calculation unsuccessful")
        ks = sps.ks_2samp(sub(a, KS_MAX), sub(b, KS_MAX))
    out["ks_statistic"], out["ks_p"] = json_float(ks.statistic), json_float(ks.pvalue)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # p-values capped to [0.001, 0.25] by scipy's table
        try:
            kw = (
                {"variant": "midrank"}  # scipy >= 1.17 asks for it; the default before
                if "variant" in inspect.signature(sps.anderson_ksamp).parameters
                else {}
            )
            res = sps.anderson_ksamp([sub(a, AD_MAX), sub(b, AD_MAX)], **kw)
        except ValueError:  # a single distinct value in both samples
            return out
    out["ad_statistic"], out["ad_p"] = json_float(res.statistic), json_float(res.pvalue)
    return out
