"""Range along the ray, robust statistics in fixed memory, the diagnosis of a FAIL, and Holm.

Synthetic sweeps go through the real LidarAccumulator as float32 clouds (as from a bag), the
metrics through the real family-wise step and diagnosis, as verify_run runs them.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as sps
from scipy.stats import binom

from simconform.spec import ImuSpec, LidarSpec
from simconform.verify import robust, stats
from simconform.verify.diagnosis import diagnose_all
from simconform.verify.family import apply_holm, p_value
from simconform.verify.metrics import ImuAccumulator, LidarAccumulator, range_and_lateral
from simconform.verify.pairing import Pair

SIGMA = 0.02
LEVEL = 0.95


def lidar_spec(sigma: float = SIGMA, bias: float = 0.0) -> LidarSpec:
    return LidarSpec.model_validate(
        {
            "type": "lidar",
            "rate_hz": 10,
            "rings": {"count": 8, "fov_deg": [-15, 15]},
            "columns": 360,
            "shutter": "global",
            "noise": {"range": {"sigma": sigma, "bias": bias}},
        }
    )


def sweep_errors(kind: str, rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    if kind == "laplace":
        return rng.laplace(0.0, SIGMA / np.sqrt(2), shape)  # same std, heavy tails
    e = SIGMA * rng.standard_normal(shape)
    if kind == "bias":
        e += 0.01
    if kind == "wide":
        e *= 1.5
    if kind in ("gross", "gross_post", "gross_rough"):
        e += 3.0
    if kind == "outliers":  # 2 % of the rays, in columns 90-96, half a metre off
        e[:, 90:97] += rng.choice([-0.5, 0.5], (shape[0], 7))
    if kind == "edges":  # the same at the silhouettes of a post (columns 90-96, see run)
        e[:, [90, 96]] += rng.choice([-0.5, 0.5], (shape[0], 2))
    return e


def run(kind: str, seed: int = 0, sweeps: int = 20, sideways: float = 0.0) -> dict:
    spec = lidar_spec()
    rng = np.random.default_rng(seed)
    dirs = spec.directions()
    acc = LidarAccumulator("lidar", spec, LEVEL, sweeps / 10)
    az = np.linspace(0, 2 * np.pi, dirs.shape[1], endpoint=False)
    for k in range(sweeps):
        # smooth surfaces (no jump between neighbouring rays), and a post 5 m away in columns
        # 90-96 when its silhouettes are the point
        r = np.broadcast_to(12.0 + 6.0 * np.sin(az + 0.1 * k), dirs.shape[:2]).copy()
        if kind in ("edges", "gross_post"):
            r[:, 90:97] = 5.0
        if kind == "gross_rough":  # clutter: the true range jumps between every two rays
            r = rng.uniform(2.0, 30.0, dirs.shape[:2])
        truth = dirs * r[..., None]
        pub = dirs * (r + sweep_errors(kind, rng, r.shape))[..., None]
        if sideways:
            pub[..., 2] += sideways  # a wrong frame / timing: every point moved up
        t = k * 100_000_000
        acc.add(Pair(t, t + 1_000_000, truth.astype(np.float32), pub.astype(np.float32)))
    sensors = {"lidar": {"type": "lidar", "metrics": acc.metrics(), **acc.details()}}
    family = apply_holm(sensors, {"lidar": acc.refits}, LEVEL)
    diagnose_all(sensors)
    return sensors["lidar"] | {"family": family}


def causes(sensor: dict) -> set[str]:
    return {d["cause"] for d in sensor.get("diagnosis", [])}


def test_range_is_measured_along_the_true_ray_and_lateral_across_it() -> None:
    d = np.array([[0.6, 0.8, 0.0]])
    truth = 10 * d
    e, lat = range_and_lateral(truth + 0.05 * d, truth, d)
    assert e[0] == pytest.approx(0.05) and lat[0] == pytest.approx(0.0, abs=1e-12)
    side = np.array([[-0.8, 0.6, 0.0]])  # perpendicular: no range error, all lateral
    e, lat = range_and_lateral(truth + 0.3 * side, truth, d)
    assert e[0] == pytest.approx(0.0, abs=1e-12) and lat[0] == pytest.approx(0.3)


def test_stream_accumulators_match_the_exact_statistics() -> None:
    rng = np.random.default_rng(3)
    x = 0.01 + SIGMA * rng.standard_normal(200_000)
    m = robust.Moments(0.01)
    h = robust.Histogram(0.01, SIGMA)
    for part in np.array_split(x, 7):
        m.add(part)
        h.add(part)
    for got, want in (
        (m.mean_ci(LEVEL), stats.mean_ci(x, LEVEL)),
        (m.std_ci(LEVEL), stats.std_ci(x, LEVEL)),
        (m.rmse_ci(LEVEL), stats.rmse_ci(x, LEVEL)),
    ):
        assert got.value == pytest.approx(want.value, rel=1e-9)
        assert got.ci == pytest.approx(want.ci, rel=1e-9)
    rob = robust.robust_summary(h, LEVEL)
    res = h.width
    assert rob["median"] == pytest.approx(np.median(x), abs=res)
    mad = np.median(np.abs(x - np.median(x)))
    assert rob["robust_sigma"] == pytest.approx(robust.MAD_TO_SIGMA * mad, abs=2 * res)
    assert rob["trimmed_sigma"] == pytest.approx(SIGMA, rel=0.02)
    assert rob["median_ci"][0] - res <= 0.01 <= rob["median_ci"][1] + res


def test_conforming_lidar_passes_with_no_diagnosis() -> None:
    s = run("normal")
    assert s["metrics"]["range_edge_outliers"]["count"] == 0
    judged = {k: m for k, m in s["metrics"].items() if k != "range_edge_outliers"}
    assert {m["verdict"] for m in judged.values()} <= {"pass", "inconclusive"}
    assert "diagnosis" not in s
    assert s["metrics"]["range_lateral_rms"]["measured"] < 1e-5  # float32 rounding only
    assert len(s["breakdown"]["per_ring"]) == 8 and len(s["breakdown"]["per_sector"]) == 12


def test_outliers_fail_std_and_are_named_as_outliers_where_they_are() -> None:
    """Half-metre errors on 2 % of the rays of smooth surfaces (no silhouette there)."""
    s = run("outliers")
    assert s["metrics"]["range_std"]["verdict"] == "fail"
    rob = s["metrics"]["range_std"]["robust"]
    assert rob["outlier_fraction"] == pytest.approx(7 / 360, rel=0.05)
    assert 0.018 < rob["robust_sigma"] < 0.022
    d = next(d for d in s["diagnosis"] if d["cause"] == "outliers")
    assert "sector 3" in d["evidence"]  # columns 90-96 lie in 90-120 deg
    assert "noise_shape" not in causes(s) and "scale" not in causes(s)


def test_outliers_at_silhouettes_are_edge_outliers_left_out() -> None:
    """The same errors on the rays next to a post's silhouettes (verify/lidar_edges.py): left
    out of the range metrics, which PASS, and counted in range_edge_outliers; any error within
    8 sigma there is still judged."""
    s = run("edges")
    edge = s["metrics"]["range_edge_outliers"]
    assert edge["count"] == 2 * 8 * 20 and edge["left_out"] and edge["edge_rays"] >= 4 * 8 * 20
    assert s["metrics"]["range_std"]["verdict"] == "pass"
    assert s["metrics"]["range_normality"]["verdict"] == "pass"
    assert s["metrics"]["range_std"]["n"] == 8 * 360 * 20 - edge["count"]


def test_a_gross_fault_is_judged_whatever_the_edges() -> None:
    """A 3 m error on every ray FAILs: at a post only the rays next to its silhouettes are
    left out (1 % of them), and in clutter, where every ray is next to a jump, the edge
    outliers are too many to be an edge effect and every point is judged."""
    post = run("gross_post")
    assert post["metrics"]["range_edge_outliers"]["count"] == 4 * 8 * 20
    rough = run("gross_rough")
    edge = rough["metrics"]["range_edge_outliers"]
    assert not edge["left_out"] and "every point is judged" in edge["reason"]
    for s in (post, rough):
        assert s["metrics"]["range_bias"]["verdict"] == "fail"
        assert causes(s) == {"gross"}


def test_wrong_noise_shape_bias_scale_and_lateral_are_told_apart() -> None:
    assert "noise_shape" in causes(run("laplace", sweeps=60))
    b = run("bias")
    assert b["metrics"]["range_bias"]["verdict"] == "fail"
    assert causes(b) == {"bias"} and "shifted" in b["diagnosis"][0]["evidence"]
    assert causes(run("wide")) == {"scale"}
    assert causes(run("gross")) == {"gross"}
    lat = run("normal", sideways=0.05)
    assert lat["metrics"]["range_lateral_rms"]["verdict"] == "fail"
    assert "lateral" in causes(lat)


def test_p_value_is_the_level_at_which_the_interval_leaves_the_band() -> None:
    rng = np.random.default_rng(5)
    x = 0.3 + rng.standard_normal(400)
    band = (-0.1, 0.1)
    p = p_value(lambda lv: stats.mean_ci(x, lv), band, 0.05)
    t = (x.mean() - 0.1) / (x.std(ddof=1) / np.sqrt(x.size))
    assert p == pytest.approx(2 * sps.t.sf(t, x.size - 1), rel=1e-6)  # two-sided CI inversion


def test_holm_keeps_a_strong_fail_and_softens_a_marginal_one() -> None:
    rng = np.random.default_rng(6)
    strong, weak = 0.5 + rng.standard_normal(400), rng.standard_normal(400)
    weak = weak - weak.mean() + 0.1 + 2.2 / np.sqrt(400) * weak.std(ddof=1)  # p ~ 0.03
    metrics, refits = {}, {}
    for name, x in (("strong", strong), ("weak", weak)):
        refits[name] = lambda lv, x=x: stats.mean_ci(x, lv)
        est = refits[name](LEVEL)
        metrics[name] = {
            "measured": est.value,
            "ci": list(est.ci),
            "tolerance": [-0.1, 0.1],
            "verdict": stats.verdict(est.ci, (-0.1, 0.1)),
        }
    for k in range(18):  # 18 more metrics that pass: a family of 20
        metrics[f"ok{k}"] = {"ci": [0, 0], "tolerance": [-1, 1], "verdict": "pass"}
    assert metrics["weak"]["verdict"] == "fail"
    sensors = {"s": {"metrics": metrics}}
    fam = apply_holm(sensors, {"s": refits}, LEVEL)
    assert fam["size"] == 20 and fam["fails"] == 1
    assert metrics["strong"]["verdict"] == "fail"
    assert metrics["strong"]["family"]["adjusted_level"] == pytest.approx(0.05 / 20)
    assert metrics["weak"]["verdict"] == "inconclusive" and "Holm" in metrics["weak"]["note"]
    assert metrics["weak"]["family"]["adjusted_level"] == pytest.approx(0.05 / 19)


def test_conforming_imu_fails_in_at_most_5_percent_of_runs_with_holm() -> None:
    """Family-wise false FAILs: 24 judged metrics per run (6 axes x bias, std, rmse, normality)
    plus the common ones; a bound from the binomial, not one seed."""
    spec = ImuSpec.model_validate(
        {
            "type": "imu",
            "rate_hz": 100,
            "noise": {
                "accel": {"bias": [0.05, 0, 0], "sigma": [0.02, 0.02, 0.02]},
                "gyro": {"bias": [0, 0.001, 0], "sigma": [0.002, 0.002, 0.002]},
            },
        }
    )
    bias = np.array([0.05, 0, 0, 0, 0.001, 0])
    sig = np.array([0.02, 0.02, 0.02, 0.002, 0.002, 0.002])
    runs, fails, raw = 100, 0, 0
    for seed in range(runs):
        rng = np.random.default_rng(seed)
        acc = ImuAccumulator("imu", spec, LEVEL, 4.0)
        truth = rng.standard_normal((150, 6))
        pub = truth + bias + sig * rng.standard_normal((150, 6))
        for k in range(150):
            acc.add(Pair(k * 10_000_000, k * 10_000_000, truth[k], pub[k]))
        ms = acc.metrics()
        sensors = {"imu": {"type": "imu", "metrics": ms}}
        apply_holm(sensors, {"imu": acc.refits}, LEVEL)
        fails += any(m["verdict"] == "fail" for m in ms.values())
        raw += any(((m.get("family") or {}).get("p") or 1.0) <= 0.05 for m in ms.values())
    # a true family-wise rate of 5 % exceeds this bound with probability below 1e-3
    assert fails <= binom.ppf(0.999, runs, 0.05), (fails, raw)
    assert raw > 2 * fails  # each metric at its own level: conforming runs fail far more often


def test_lidar_memory_does_not_grow_with_the_run() -> None:
    """Issue 17: every accumulated array has a size fixed by the spec, and the kept sample is
    bounded and spread over the whole run."""
    res = robust.Reservoir(size=1000)
    for k in range(100):
        res.add(np.full(500, k))
    v = res.values()
    assert 500 <= v.size <= 1000 and v.min() == 0 and v.max() >= 95
    spec = lidar_spec()
    acc = LidarAccumulator("lidar", spec, LEVEL, 1.0)
    dirs = spec.directions().astype(np.float32)
    sizes = []
    for k in range(3):
        acc.add(Pair(k, k, 10 * dirs, 10.01 * dirs))
        for st in (acc.split.all, acc.split.kept or acc.split.all):  # kept: made lazily
            sizes.append(st.hist.counts.nbytes + st.ring_hist.counts.nbytes + st.ring_sums.nbytes)
    assert len(set(sizes)) == 1 and acc.errors == []
