"""verify/streaming.py and verify/series.py against the batch computations they replace
(verify/stats.py, accumulator.quantile_estimate, robust.robust_of_array), over generated
series and chunkings; merging in any order gives the same moments."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import chisquare

from simconform.verify import robust, stats, streaming
from simconform.verify.accumulator import quantile_estimate
from simconform.verify.robust import robust_of_array
from simconform.verify.series import SeriesStats

finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)
series = st.lists(finite, min_size=2, max_size=300).map(np.array)


def cuts(n: int, draw) -> list[int]:
    """Chunk boundaries of a series of n values (empty chunks included)."""
    return sorted(draw(st.lists(st.integers(0, n), max_size=8)))


def chunks(x: np.ndarray, bounds: list[int]) -> list[np.ndarray]:
    edges = [0, *bounds, x.size]
    return [x[a:b] for a, b in itertools.pairwise(edges)]


def close(a: stats.Estimate, b: stats.Estimate, scale: float) -> None:
    """Equal within float rounding (relative to the data's scale)."""
    tol = 1e-9 * max(scale, 1e-12)
    assert a.n == b.n
    for u, v in ((a.value, b.value), *zip(a.ci, b.ci, strict=True)):
        if math.isnan(v):
            assert math.isnan(u)
        elif math.isinf(v):
            assert u == v
        else:
            assert abs(u - v) <= tol * (1 + abs(v) / max(scale, 1e-12)), (u, v)


@settings(max_examples=150, deadline=None)
@given(x=series, data=st.data(), level=st.sampled_from([0.9, 0.95, 0.999]))
def test_welford_equals_batch_over_any_chunking(x, data, level):
    w = streaming.Welford()
    for part in chunks(x, cuts(x.size, data.draw)):
        w.add(part)
    scale = float(np.max(np.abs(x))) + 1e-300
    spread = float(np.std(x))
    assert w.n == x.size
    assert abs(w.mean - x.mean()) <= 1e-12 * scale
    if spread > 1e-6 * scale:  # the intervals of a near-constant series are all rounding
        close(w.mean_ci(level), stats.mean_ci(x, level), scale)
        close(w.mean_ci(level, 0.3), stats.mean_ci(x, level, 0.3), scale)
        close(w.std_ci(level), stats.std_ci(x, level), spread)
        close(w.rmse_ci(level), stats.rmse_ci(x, level), scale)


@settings(max_examples=100, deadline=None)
@given(x=series, data=st.data())
def test_welford_merge_order_is_irrelevant(x, data):
    parts = chunks(x, cuts(x.size, data.draw))
    order = data.draw(st.permutations(range(len(parts))))
    forward, shuffled = streaming.Welford(), streaming.Welford()
    for p in parts:
        one = streaming.Welford()
        one.add(p)
        forward.merge(one)
    for i in order:
        one = streaming.Welford()
        one.add(parts[i])
        shuffled.merge(one)
    scale = float(np.max(np.abs(x))) + 1.0
    assert forward.n == shuffled.n == x.size
    assert forward.mean == pytest.approx(shuffled.mean, abs=1e-12 * scale)
    for k in ("m2", "m3", "m4"):
        p = int(k[1])
        assert getattr(forward, k) == pytest.approx(
            getattr(shuffled, k), rel=1e-7, abs=1e-9 * x.size * scale**p
        )


ints = st.lists(st.integers(-50, 400), min_size=2, max_size=400).map(np.array)


@settings(max_examples=150, deadline=None)
@given(x=ints, q=st.sampled_from([0.05, 0.5, 0.95]), data=st.data())
def test_counts_quantile_is_numpys(x, q, data):
    c = streaming.Counts()
    for part in chunks(x, cuts(x.size, data.draw)):
        c.add(part)
    values, counts = c.table()
    got = streaming.quantile_ci(values, counts, q, 0.95)
    close(got, quantile_estimate(x.astype(float), q, 0.95), 400.0)
    assert c.max == x.max()


@settings(max_examples=150, deadline=None)
@given(
    d=st.lists(st.sampled_from([0, 99, 100, 100, 100, 101, 150, 200, 300]), max_size=300).map(
        np.array
    ),
    level=st.sampled_from([0.9, 0.95]),
)
def test_rate_from_counts_is_rate_from_periods(d, level):
    c = streaming.Counts()
    c.add(d)
    est, jitter, dropped = streaming.rate_from_counts(c, level)
    ref, ref_jitter, ref_dropped = stats.rate_from_periods(d, level)
    close(est, ref, 1e7)
    assert dropped == ref_dropped
    assert (math.isnan(jitter) and math.isnan(ref_jitter)) or jitter == pytest.approx(ref_jitter)


def test_counts_grid_coarsens_and_stays_bounded(monkeypatch):
    """Past CAP distinct values the grid doubles: memory bounded, intervals widened by it."""
    monkeypatch.setattr(streaming, "CAP", 64)
    c = streaming.Counts()
    rng = np.random.default_rng(1)
    x = rng.integers(0, 10_000, 5000)
    c.add(x)
    assert len(c.counts) <= 64 and c.width > 1 and c.n == x.size
    values, counts = c.table()
    med = streaming.quantile(values, counts, 0.5)
    assert abs(med - np.median(x)) <= c.width


@settings(max_examples=100, deadline=None)
@given(x=series, data=st.data(), walk=st.sampled_from([0.0, 1e-3]))
def test_pair_differences_equal_batch(x, data, walk):
    p = streaming.PairDiffs(streaming.Reservoir(1000))
    for part in chunks(x, cuts(x.size, data.draw)):
        p.add(part)
    close(p.std(0.95, walk), stats.std_from_pair_differences(x, 0.95, walk), np.ptp(x) + 1e-9)
    white = np.diff(x)[::2] / np.sqrt(2.0)
    np.testing.assert_allclose(p.white.values(), white, rtol=1e-12, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(n=st.integers(16, 3000), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_block_sums_allan_walk_equals_batch(n, seed, data):
    x = np.cumsum(np.random.default_rng(seed).normal(size=n)) * 0.01
    b = streaming.BlockSums()
    for part in chunks(x, cuts(n, data.draw)):
        b.add(part)
    close(b.allan_walk(0.01, 0.02, 0.95), stats.allan_walk(x, 0.01, 0.02, 0.95), 1.0)


def test_block_sums_coarsened_use_a_multiple_of_the_block(monkeypatch):
    """With fewer base blocks than samples, m is rounded down to a multiple of b; the estimate
    is the batch formula at that m."""
    monkeypatch.setattr(streaming, "MAX_BLOCKS", 512)
    x = np.random.default_rng(3).normal(size=10_007)
    b = streaming.BlockSums()
    for part in np.array_split(x, 13):
        b.add(part)
    assert b.sums.size <= 512 and b.b > 1
    m = max(stats.allan_blocks(x.size)[0] // b.b, 1) * b.b
    assert m % b.b == 0 and m != stats.allan_blocks(x.size)[0]
    pairs = x.size // (2 * m)
    blocks = x[: 2 * pairs * m].reshape(2 * pairs, m).mean(axis=1)
    d = blocks[1::2] - blocks[0::2]
    white, gain = stats.allan_terms(m, 0.01, 0.5)
    want = math.sqrt(max(float(d @ d) / pairs - white, 0.0) / gain)
    assert b.allan_walk(0.01, 0.5, 0.95).value == pytest.approx(want, rel=1e-9)


def test_reservoir_is_the_series_until_full_then_uniform():
    r = streaming.Reservoir(10)
    r.add(np.arange(7.0))
    np.testing.assert_array_equal(r.values(), np.arange(7.0))
    # inclusion of each of 40 positions over 3000 seeded reservoirs of 10: uniform (p = 1/4)
    hits = np.zeros(40)
    for seed in range(3000):
        r = streaming.Reservoir(10, seed)
        for part in np.array_split(np.arange(40.0), 5):
            r.add(part)
        hits[r.values().astype(int)] += 1
    assert hits.sum() == 30_000
    assert chisquare(hits).pvalue > 1e-4


@settings(max_examples=100, deadline=None)
@given(
    stamps=st.lists(st.integers(0, 10_000), min_size=1, max_size=200, unique=True),
    seed=st.integers(0, 1000),
)
def test_reorder_releases_in_stamp_order(stamps, seed):
    """Log time = stamp + a latency up to 300: items come out sorted, none held at the end."""
    rng = np.random.default_rng(seed)
    logged = sorted((s + int(rng.integers(0, 301)), s) for s in stamps)
    r = streaming.Reorder(300)
    out = [s for log, s in logged for s, _ in r.push(s, log, None)]
    out += [s for s, _ in r.flush()]
    assert out == sorted(stamps) and r.late == 0


@settings(max_examples=400, deadline=None)
@given(x=series, sigma=st.sampled_from([0.0, 0.5, 3.0]), data=st.data())
def test_series_robust_equals_robust_of_array(x, sigma, data):
    s = SeriesStats(sigma, 1.0)
    for part in chunks(x, cuts(x.size, data.draw)):
        for v in part:
            s.add(v)
    got, want = s.robust(0.95), robust_of_array(x, sigma, 0.95, centre=1.0)
    assert got.keys() == want.keys()
    for k, v in want.items():
        if isinstance(v, float) and not math.isnan(v):
            assert got[k] == pytest.approx(v, rel=1e-6, abs=1e-9), k
        elif not isinstance(v, float):
            assert got[k] == v, k
    np.testing.assert_array_equal(s.sample.values(), x)


@settings(max_examples=100, deadline=None)
@given(x=series, sigma=st.sampled_from([0.0, 0.5]))
def test_an_ended_series_is_judged_without_adding(x, sigma):
    """`end` (a reader's last step, verify/parallel.py) adds what is buffered and fixes the
    grid, also the one a series without a configured sigma takes from its data: judging
    then adds nothing, so the process that writes the report needs no compiled kernel, and
    the result is what judging the series unended gives."""
    ended, open_ = SeriesStats(sigma, 1.0), SeriesStats(sigma, 1.0)
    for v in x:
        ended.add(v)
        open_.add(v)
    ended.end()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(robust.Histogram, "add", lambda *a: pytest.fail("added while judging"))
        got = ended.robust(0.95)
        assert ended.n == x.size
    want = open_.robust(0.95)
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert got[k] == v or (isinstance(v, float) and math.isnan(v) and math.isnan(got[k])), k


def test_a_sample_later_than_the_reorder_window_is_left_out_of_the_rate_and_counted():
    """A published copy logged after the window has moved past its stamp (a replayed bag's
    straggler) would give a negative interval and stretch its neighbours': it is left out of
    the ordered statistics and counted on rate_hz; the other samples' rate is untouched."""
    from simconform.spec import load_spec
    from simconform.verify.metrics import ImuAccumulator
    from simconform.verify.pairing import Pair

    spec = load_spec("sensors_spec/rover_core.yaml").sensors["imu"]
    period = round(1e9 / spec.rate_hz)
    truth = np.array([0.0, 0.0, 9.81, 0.0, 0.0, 0.1])

    def fed(straggler: bool):
        acc = ImuAccumulator("imu", spec, 0.95, 60.0)
        for k in range(3000):
            if straggler and k == 1000:
                continue  # sample 1000 comes 5 s late, below
            acc.add(Pair(k * period, k * period + 1_000_000, truth, truth))
            if straggler and k == 1000 + round(5e9 / period):
                acc.add(Pair(1000 * period, 1000 * period + 5_000_000_000, truth, truth))
        return acc.metrics()["rate_hz"]

    late, clean = fed(True), fed(False)
    assert late["out_of_order_left_out"] == 1
    assert "out_of_order_left_out" not in clean
    assert late["measured"] == pytest.approx(clean["measured"], rel=1e-9)
    assert late["intervals_with_drops"] == 1  # the gap its absence left, not a negative one
