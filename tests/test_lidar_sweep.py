"""The verifier's compiled lidar pass and histogram kernels against the numpy definitions they
replace (verify/lidar_sweep.py, and verify/sums.py through robust.Histogram.add and
lidar_edges.RangeStats.add): the same bits on random sweeps, with misses, NaNs, zero-length
truths, float32 and float64 clouds, and column counts on both sides of the edge threshold's
precision switch."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simconform.verify import robust
from simconform.verify.lidar_edges import RangeStats, edge_rays, edge_rel
from simconform.verify.lidar_sweep import sweep
from simconform.verify.metrics import range_and_lateral


def _cloud(rng: np.random.Generator, rows: int, cols: int, dtype, miss: float) -> np.ndarray:
    """Points on random rays at ranges with jumps between columns (edges), some missing."""
    az = np.linspace(0, 2 * np.pi, cols, endpoint=False)
    el = np.linspace(-0.3, 0.3, rows)[:, None]
    d = np.stack(np.broadcast_arrays(np.cos(el) * np.cos(az), np.cos(el) * np.sin(az),
                                     np.sin(el)), axis=-1)  # fmt: skip
    r = rng.choice([2.0, 7.5, 30.0], size=(rows, cols)) + rng.normal(0, 0.05, (rows, cols))
    pts = (d * r[..., None]).astype(dtype)
    pts[rng.random((rows, cols)) < miss] = np.nan
    pts[rng.random((rows, cols)) < 0.02, 1] = np.nan  # a NaN y behind a finite x
    pts[rng.random((rows, cols)) < 0.01] = 0.0  # a zero-length truth: the nominal ray
    return pts, d


def _reference(truth, pub, nominal, scale):
    tf = np.isfinite(truth[..., 0])
    pf = np.isfinite(pub[..., 0])
    both = tf & pf
    e, lat = range_and_lateral(pub[both], truth[both], nominal[both])
    ring, col = np.nonzero(both)
    edge = edge_rays(truth, scale)[both]
    counts = (int(tf.sum()), int((tf & ~pf).sum()), int((~tf & pf).sum()))
    return e, lat, ring, col, edge, counts


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    rows=st.integers(1, 9),
    cols=st.sampled_from([3, 8, 50, 360, 1024]),
    dtype=st.sampled_from([np.float32, np.float64]),
    miss=st.floats(0.0, 0.5),
    scale=st.sampled_from([1e-3, 0.02, 0.5]),
)
def test_sweep_gives_the_numpy_definitions_bits(seed, rows, cols, dtype, miss, scale) -> None:
    rng = np.random.default_rng(seed)
    truth, nominal = _cloud(rng, rows, cols, dtype, miss)
    pub = (truth + rng.normal(0, scale, truth.shape)).astype(dtype)
    pub[rng.random((rows, cols)) < 0.1] = np.nan  # dropped
    spurious = rng.random((rows, cols)) < 0.05
    pub[spurious] = np.where(np.isfinite(truth[spurious]), pub[spurious], 1.0)
    e, lat, ring, col, edge, counts = _reference(truth, pub, nominal, scale)
    got = sweep(truth, pub, nominal, scale)
    assert got.e.tobytes() == e.tobytes() and got.lateral.tobytes() == lat.tobytes()
    assert np.array_equal(got.ring, ring) and np.array_equal(got.col, col)
    assert np.array_equal(got.edge, edge)
    assert (got.finite_truth, got.lost, got.spurious) == counts


def test_both_precisions_of_the_edge_threshold_are_exercised() -> None:
    """360 columns give the tangent's float64 threshold, 50 the float EDGE_REL_MAX (numpy then
    thresholds a float32 cloud in float32), so the property above covers both branches."""
    assert isinstance(edge_rel(360), np.floating) and not isinstance(edge_rel(50), np.floating)


def _hist_numpy(h: robust.Histogram, x: np.ndarray, g: np.ndarray) -> None:
    """Histogram.add as numpy computed it before the compiled pass (the definition)."""
    k = np.floor((x - h.centre) / h.width + h.bins / 2)
    inside = (k >= 0) & (k < h.bins)
    flat = g[inside] * h.bins + k[inside].astype(np.int64)
    h.counts += np.bincount(flat, minlength=h.counts.size).reshape(h.counts.shape)
    if not inside.all():
        go, d = g[~inside], x[~inside] - h.centre
        h.outside += np.bincount(go, minlength=len(h.outside))
        h.below += np.bincount(go[d < 0], minlength=len(h.below))
        h.outside_sq += np.bincount(go, weights=d * d, minlength=len(h.outside))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), groups=st.integers(1, 16), calls=st.integers(1, 4))
def test_histogram_and_group_sums_give_the_bincount_bits(seed, groups, calls) -> None:
    rng = np.random.default_rng(seed)
    mine = robust.Histogram(0.01, 0.02, groups, 8, 32.0)
    theirs = robust.Histogram(0.01, 0.02, groups, 8, 32.0)
    stats = RangeStats(0.01, 0.02, groups, groups)
    sums = np.zeros((4, groups))
    for _ in range(calls):
        n = int(rng.integers(0, 3000))
        x = 0.01 + rng.standard_t(2, n) * 0.05  # heavy tails: values off the grid too
        x[rng.random(n) < 0.01] = np.nan
        g = rng.integers(0, groups, n)
        lat = np.abs(rng.normal(0, 0.01, n))
        mine.add(x, g)
        _hist_numpy(theirs, x, g)
        stats.add(x, lat, g, g)
        y = x - stats.moments.shift
        for k, w in enumerate((None, y, y * y, lat * lat)):
            sums[k] += np.bincount(g, weights=w, minlength=groups)
    for a in ("counts", "outside", "below", "outside_sq"):
        assert getattr(mine, a).tobytes() == getattr(theirs, a).tobytes(), a
    assert stats.ring_sums.tobytes() == sums.tobytes()
    assert stats.sector_sums.tobytes() == sums.tobytes()


def test_a_group_out_of_range_is_refused() -> None:
    h = robust.Histogram(0.0, 1.0, 3)
    with pytest.raises(ValueError, match="out of range"):
        h.add(np.zeros(2), np.array([0, 3]))
    assert h.total() == 0  # nothing counted, as numpy's bincount refused it whole
