"""verify/distributions.py against scipy.stats, which it stands in for in the verifier (issue 17:
the 20 MB scipy.stats costs), and the verifier's process kept free of scipy.stats."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from simconform.verify import distributions as d

probs = st.floats(1e-12, 1 - 1e-12)
levels = st.sampled_from([0.005, 0.0125, 0.025, 0.975, 0.9875, 0.995])


@settings(max_examples=300, deadline=None)
@given(q=probs, df=st.integers(1, 10**7), x=st.floats(-40, 40), loc=st.floats(-5, 5))
def test_normal_t_and_chi2_are_scipys(q: float, df: int, x: float, loc: float) -> None:
    """The same special function scipy.stats evaluates: equal to a few ulps (bitwise on the
    scipy the project pins today; a later scipy may reorder its arithmetic)."""
    np.testing.assert_allclose(d.norm_ppf(q), stats.norm.ppf(q), rtol=1e-14)
    np.testing.assert_allclose(d.norm_cdf(x), stats.norm.cdf(x), rtol=1e-14)
    np.testing.assert_allclose(d.norm_sf(x), stats.norm.sf(x), rtol=1e-14)
    # exp(-z^2 / 2) turns z's last-bit rounding into a relative z^2 ulps (z up to 60 here)
    np.testing.assert_allclose(d.norm_pdf(x, loc, 0.7), stats.norm.pdf(x, loc, 0.7), rtol=1e-11)
    np.testing.assert_allclose(d.t_ppf(q, df), stats.t.ppf(q, df), rtol=1e-12)
    np.testing.assert_allclose(d.chi2_ppf(q, df), stats.chi2.ppf(q, df), rtol=1e-12)


@settings(max_examples=400, deadline=None)
@given(
    n=st.integers(1, 10**7),
    q=st.one_of(levels, probs),
    p=st.one_of(st.just(0.5), st.floats(1e-6, 1 - 1e-6)),
)
def test_binomial_quantile_is_scipys_exactly(n: int, q: float, p: float) -> None:
    """binom_ppf picks the order statistics of every quantile interval: the smallest k with
    cdf(k) >= q, and scipy's integer but at an exact tie (cdf(k) == q, as the median of an odd
    count at p = 0.5), which Boost's quantile rounds up to k + 1."""
    k = d.binom_ppf(q, n, p)
    assert float(d.binom_cdf(k, n, p)) >= q and (k == 0 or float(d.binom_cdf(k - 1, n, p)) < q)
    k_scipy = float(stats.binom.ppf(q, n, p))
    assert k == k_scipy or (k == k_scipy - 1 and abs(float(stats.binom.cdf(k, n, p)) - q) < 1e-14)


def test_binomial_quantile_ends() -> None:
    assert d.binom_ppf(0.0, 10, 0.5) == stats.binom.ppf(0.0, 10, 0.5) == -1.0
    assert d.binom_ppf(1.0, 10, 0.5) == stats.binom.ppf(1.0, 10, 0.5) == 10.0
    assert np.isnan(d.binom_ppf(1.5, 10, 0.5))


@settings(max_examples=300, deadline=None)
@given(n=st.integers(1, 10**7), p=st.floats(1e-6, 1 - 1e-6), z=st.floats(-4, 4))
def test_binomial_cdf_sf_pmf(n: int, p: float, z: float) -> None:
    k = np.clip(np.round(n * p + z * np.sqrt(n * p * (1 - p)) + np.arange(-3, 4)), -2, n + 2)
    np.testing.assert_allclose(d.binom_sf(k, n, p), stats.binom.sf(k, n, p), rtol=1e-13)
    # cdf and pmf serve power predictions only (verify/power.py). The cdf is I_p's complement,
    # Boost's forms it from 1 - p, which differ by n ulps of p for a small p (5.7e-11 at
    # n = 2e6, p = 1e-6); exp(logpmf) loses digits to gammaln's size at n ~ 10^7
    np.testing.assert_allclose(d.binom_cdf(k, n, p), stats.binom.cdf(k, n, p), rtol=1e-8)
    np.testing.assert_allclose(d.binom_pmf(k, n, p), stats.binom.pmf(k, n, p), rtol=1e-6)
    assert d.binom_pmf(2.5, 10, p) == 0.0


@settings(max_examples=300, deadline=None)
@given(k=st.floats(0.01, 40), q=probs, u=st.floats(-1.2, 1.2))
def test_truncated_normal(k: float, q: float, u: float) -> None:
    np.testing.assert_allclose(d.truncnorm_std(k), stats.truncnorm.std(-k, k), rtol=1e-9)
    x = u * k
    np.testing.assert_allclose(
        d.truncnorm_cdf(x, k), stats.truncnorm.cdf(x, -k, k), rtol=1e-10, atol=1e-13
    )
    np.testing.assert_allclose(
        d.truncnorm_ppf(q, k), stats.truncnorm.ppf(q, -k, k), rtol=1e-9, atol=1e-12 * k
    )


@settings(max_examples=100, deadline=None)
@given(n=st.integers(2, 6000), seed=st.integers(0, 2**32 - 1), scale=st.floats(1e-6, 1e6))
def test_anderson_statistic_is_scipys_exactly(n: int, seed: int, scale: float) -> None:
    x = np.random.default_rng(seed).standard_t(5, n) * scale
    if x.max() == x.min():
        return
    new = "method" in inspect.signature(stats.anderson).parameters  # scipy >= 1.17
    kw = {"method": "interpolate"} if new else {}
    assert d.anderson_norm_statistic(x) == float(stats.anderson(x, "norm", **kw).statistic)


@pytest.mark.parametrize(("spec", "bound_mb"), [("rover_core.yaml", 350), ("rover.yaml", 400)])
def test_verify_imports_neither_scipy_stats_nor_spatial(
    tmp_path: Path, spec: str, bound_mb: int
) -> None:
    """`simconform verify` keeps scipy.stats and scipy.spatial (simconform.frames' Rotation,
    with scipy.sparse and scipy.linalg: 12 MB; the verifier only wraps angles, from
    simconform.angles) out of its memory, and its peak RSS (its own and
    its children's, as /usr/bin/time counts it) within a guard against regressions. The
    bounds are loose because about 130 MB of the peak are shared libraries' pages, whose count
    depends on the page cache: a fresh install maps more of libllvmlite.so (numba's import
    +91 MB against +65 in a venv used all day, all of it file-backed). Measured: rover_core's
    4 s run 249-265 MB; the camera spec's (its camera judged in the verifying process for a
    short run, in a worker for a long one) 298-315, and 351 MB once in a fresh CI run.
    Issue 17's bound is measured on 1,000 s runs in docs/verification.md#memory. A 4 s run
    leaves metrics INCONCLUSIVE, so the power plan written beside them runs too."""
    out = tmp_path / "run"
    args = ["run", "--spec", f"sensors_spec/{spec}", "--duration", "4", "--out", str(out)]
    ran = subprocess.run(
        [sys.executable, "-m", "simconform", *args, "--no-progress"],
        cwd=Path(__file__).parents[1],
        capture_output=True,
    )
    assert ran.returncode == 1, ran.stderr  # INCONCLUSIVE
    # VmHWM, not this process's wait4: a child's maxrss counts the image it was forked from
    # (pytest's, hundreds of MB) until its exec
    code = (
        "import re, resource, sys\n"
        "from simconform.cli import app\n"
        f"sys.argv = ['simconform', 'verify', {str(out)!r}, '--json']\n"
        "try:\n    app()\nexcept SystemExit:\n    pass\n"
        "hwm = int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))\n"
        "kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
        "print('scipy.stats' in sys.modules, 'scipy.spatial' in sys.modules, max(hwm, kids))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    report = json.loads((out / "report" / "report.json").read_text())
    assert any("planned" in m for s in report["sensors"].values() for m in s["metrics"].values())
    stats_in, spatial_in, peak_kb = r.stdout.strip().splitlines()[-1].split()
    assert stats_in == spatial_in == "False"
    assert int(peak_kb) < bound_mb * 1024, f"verify's peak RSS {peak_kb} kB"
