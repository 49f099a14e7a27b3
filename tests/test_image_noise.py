"""The camera's table noise sampler (pipeline/image_noise.py) draws the exact discrete
distribution of round(clamp(v + bias + sigma Z, 0, 255)): checked by chi-square against the
closed-form probabilities over generated (bias, sigma), and the closed form itself against the
per-pixel float32 definition it replaced."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chi2

from simconform.pipeline.image_noise import (
    _BITS,
    _CELLS,
    _resolve,
    _tables,
    draw_image_noise,
    exact_probabilities,
)
from simconform.pipeline.noise import apply_image_noise

SETTINGS = settings(max_examples=25, derandomize=True, deadline=None, database=None)
PER_VALUE = 3000  # draws per clean value
P_MIN = 1e-4  # derandomized examples and fixed seeds: the test is deterministic


def chi_square_p(out: np.ndarray, probs: np.ndarray) -> float:
    """One chi-square over all clean values: out holds PER_VALUE draws of each v in order;
    cells expected below 5 are pooled into one per v."""
    stat, dof = 0.0, 0
    for v in range(256):
        seen = np.bincount(out[v * PER_VALUE : (v + 1) * PER_VALUE], minlength=256)
        exp = probs[v] * PER_VALUE
        big = exp >= 5
        obs = np.append(seen[big], seen[~big].sum())
        e = np.append(exp[big], exp[~big].sum())
        keep = e > 0
        stat += float((((obs - e) ** 2)[keep] / e[keep]).sum())
        dof += int(keep.sum()) - 1
    return float(chi2.sf(stat, dof)) if dof > 0 else 1.0


CLEAN = np.repeat(np.arange(256, dtype=np.uint8), PER_VALUE)


@SETTINGS
@given(
    bias=st.floats(-20, 20, allow_nan=False),
    sigma=st.one_of(st.floats(0.05, 1.5), st.floats(1.5, 60)),
    seed=st.integers(0, 2**32 - 1),
)
def test_table_draws_follow_the_exact_distribution(bias: float, sigma: float, seed: int) -> None:
    b, s = float(np.float32(bias)), float(np.float32(sigma))
    out = draw_image_noise(CLEAN, b, s, np.random.default_rng(seed))
    assert out.dtype == np.uint8 and out.shape == CLEAN.shape
    assert chi_square_p(out, exact_probabilities(b, s)) > P_MIN


@settings(max_examples=8, derandomize=True, deadline=None, database=None)
@given(bias=st.floats(-5, 5, allow_nan=False), sigma=st.floats(0.2, 30))
def test_closed_form_is_the_float32_definition(bias: float, sigma: float) -> None:
    """The per-pixel float32 path it replaced draws the same distribution."""
    b, s = np.float32(bias), np.float32(sigma)
    out = apply_image_noise(CLEAN, b, s, np.random.default_rng(7))
    assert chi_square_p(out, exact_probabilities(float(b), float(s))) > P_MIN


def test_probabilities_sum_to_one_and_clamp_the_tails() -> None:
    p = exact_probabilities(3.0, 10.0)
    assert np.allclose(p.sum(axis=1), 1.0, atol=1e-12)
    # v = 0 with sigma 10: everything below 0.5 lands on 0, P = Phi((0.5 - 3) / 10)
    assert p[0, 0] == pytest.approx(0.401294, abs=1e-6)


def test_zero_sigma_is_the_shifted_clamped_rounded_value() -> None:
    img = np.arange(256, dtype=np.uint8).reshape(16, 16)
    for bias in (0.0, 2.5, -3.7, 300.0):
        want = apply_image_noise(img, np.float32(bias), np.float32(0), np.random.default_rng(0))
        assert np.array_equal(draw_image_noise(img, bias, 0.0, np.random.default_rng(0)), want)


def test_same_seed_same_frame_and_frames_differ() -> None:
    img = np.full((48, 64, 3), 128, dtype=np.uint8)
    a = draw_image_noise(img, 0.0, 5.0, np.random.default_rng(3))
    b = draw_image_noise(img, 0.0, 5.0, np.random.default_rng(3))
    rng = np.random.default_rng(3)
    first, second = draw_image_noise(img, 0.0, 5.0, rng), draw_image_noise(img, 0.0, 5.0, rng)
    assert np.array_equal(a, b) and np.array_equal(a, first)
    assert not np.array_equal(first, second)


@SETTINGS
@given(
    bias=st.floats(-300, 300, allow_nan=False),
    sigma=st.floats(1e-3, 500),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_doubtful_cell_counts_the_boundaries_below_u(bias: float, sigma: float, seed: int):
    """The compiled binary search over a CDF row gives #{k : CDF_k <= U}, the count of the
    definition (rows are non-decreasing, so the two agree on every U)."""
    b, s = float(np.float32(bias)), float(np.float32(sigma))
    cdf, _ = _tables(b, s)
    assert (np.diff(cdf, axis=1) >= 0).all()
    rng = np.random.default_rng(seed)
    n = 4000
    flat = rng.integers(0, 256, n).astype(np.uint8)
    bits = rng.integers(0, 1 << 16, n).astype(np.uint16)
    more = rng.random(n)
    more[:8] = 0.0  # U exactly on a cell's start
    out = np.zeros(n, dtype=np.uint8)
    _resolve(flat, bits, np.arange(n), more, cdf, out)
    u = ((bits >> (16 - _BITS)).astype(np.float64) + more) / _CELLS
    assert np.array_equal(out, (cdf[flat] <= u[:, None]).sum(axis=1))
