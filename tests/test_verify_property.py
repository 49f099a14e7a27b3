"""The verifier recovers what the pipeline was configured with, inside its own intervals.

Hypothesis generates error models; for each, the real pipeline (noise -> dropout -> latency)
runs on synthetic truth and the real accumulators measure it, from float32 clouds exactly as
they come out of a bag. Each interval may miss 1 - level of the time by design, so the tests
count misses over all examples and bound them by the binomial distribution, instead of
trusting one lucky seed.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binom

from simconform.adapters.base import GnssTruth, LidarTruth
from simconform.pipeline.chain import SensorPipeline
from simconform.spec import GnssSpec, LidarSpec
from simconform.verify.metrics import GnssAccumulator, LidarAccumulator
from simconform.verify.pairing import Pair, Unpaired
from simconform.world import Origin

EXAMPLES = 120
LEVEL = 0.95
SETTINGS = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None)


def max_misses(n: int, level: float = LEVEL) -> int:
    """Misses a correct interval exceeds with probability below 1e-6."""
    return int(binom.ppf(1 - 1e-6, n, 1 - level))


def covers(m: dict, value: float) -> bool:
    lo, hi = m["ci"]
    return lo - 1e-12 <= value <= hi + 1e-12


lidar_models = st.fixed_dictionaries(
    {
        "sigma": st.floats(1e-3, 0.2),
        "bias": st.floats(-0.05, 0.05),
        "point": st.floats(0.0, 0.4),
        "sample": st.floats(0.0, 0.3),
        "fixed_ms": st.floats(0.0, 400.0),
        "jitter_frac": st.floats(0.0, 1.0),
        "rate": st.sampled_from([5.0, 10.0, 20.0]),
        "seed": st.integers(0, 2**32 - 1),
    }
)


def run_lidar(cfg: dict) -> dict:
    jitter = cfg["jitter_frac"] * cfg["fixed_ms"] / 3.0
    spec = LidarSpec.model_validate(
        {
            "type": "lidar",
            "rate_hz": cfg["rate"],
            "rings": {"count": 4, "fov_deg": [-10, 10]},
            "columns": 64,
            "shutter": "global",
            "noise": {"range": {"sigma": cfg["sigma"], "bias": cfg["bias"]}},
            "dropout": {"point": cfg["point"], "sample": cfg["sample"]},
            "latency": {"fixed_ms": cfg["fixed_ms"], "jitter_ms": jitter},
        }
    )
    rng = np.random.default_rng(cfg["seed"])
    dirs = spec.directions()
    pipe = SensorPipeline("lidar", spec, cfg["seed"])
    n_caps = 60
    acc = LidarAccumulator("lidar", spec, LEVEL, n_caps / cfg["rate"])
    for k in range(n_caps):
        ranges = rng.uniform(1.0, 20.0, dirs.shape[:2])
        ranges[rng.random(ranges.shape) < 0.1] = np.nan  # no-return rays
        truth = LidarTruth(
            dirs * ranges[..., None],
            dirs,
            ranges,
            np.ones(ranges.shape, np.float32),
            np.zeros(ranges.shape, np.float32),
        )
        t_ns = round(k * 1e9 / cfg["rate"])
        pub = pipe.process(truth, t_ns)
        t32 = truth.points.astype(np.float32)
        if pub.sample is None:
            acc.add(Unpaired(t_ns, t32))
        else:
            acc.add(Pair(t_ns, pub.publish_ns, t32, pub.sample.points.astype(np.float32)))
    return acc.metrics()


@SETTINGS
@given(lidar_models)
def _collect_lidar(cfg: dict) -> None:
    m = run_lidar(cfg)
    LIDAR.append((cfg, m))
    # a real bug shows at once, not only in the count: nothing lands 8 CI widths away
    width = m["range_std"]["ci"][1] - m["range_std"]["ci"][0]
    assert abs(m["range_std"]["measured"] - cfg["sigma"]) < 8 * width + 1e-9


LIDAR: list = []


def test_lidar_error_model_recovered_within_intervals() -> None:
    LIDAR.clear()
    _collect_lidar()
    assert len(LIDAR) == EXAMPLES
    misses = {
        "range_std": 0,
        "range_bias": 0,
        "point_dropout": 0,
        "sample_dropout": 0,
        "latency_ms": 0,
    }
    for cfg, m in LIDAR:
        misses["range_std"] += not covers(m["range_std"], cfg["sigma"])
        misses["range_bias"] += not covers(m["range_bias"], cfg["bias"])
        misses["point_dropout"] += not covers(m["point_dropout"], cfg["point"])
        misses["sample_dropout"] += not covers(m["sample_dropout"], cfg["sample"])
        if m["latency_ms"].get("ci"):
            lo, hi = m["latency_ms"]["ci"]
            misses["latency_ms"] += not (lo - 1e-6 <= cfg["fixed_ms"] <= hi + 1e-6)
    bound = max_misses(EXAMPLES)
    assert all(v <= bound for v in misses.values()), (misses, bound)


def test_lidar_latency_is_exact_without_jitter() -> None:
    cfg = {
        "sigma": 0.02,
        "bias": 0.0,
        "point": 0.1,
        "sample": 0.1,
        "fixed_ms": 123.456,
        "jitter_frac": 0.0,
        "rate": 10.0,
        "seed": 7,
    }
    m = run_lidar(cfg)
    assert m["latency_ms"]["measured"] == m["latency_ms"]["ci"][0] == m["latency_ms"]["ci"][1]
    assert abs(m["latency_ms"]["measured"] - 123.456) < 1e-6  # publish at capture + latency


gnss_models = st.fixed_dictionaries(
    {
        "sigma": st.tuples(*[st.floats(0.05, 5.0)] * 3),
        "bias": st.tuples(*[st.floats(-1.0, 1.0)] * 3),
        "seed": st.integers(0, 2**32 - 1),
    }
)
ORIGIN = Origin(lat=48.262, lon=11.668, alt=480.0)
GNSS: list = []


@SETTINGS
@given(gnss_models)
def _collect_gnss(cfg: dict) -> None:
    GNSS.append((cfg, run_gnss(cfg)))


def run_gnss(cfg: dict) -> dict:
    import pymap3d

    spec = GnssSpec.model_validate(
        {
            "type": "gnss",
            "rate_hz": 10,
            "noise": {"position": {"sigma": cfg["sigma"], "bias": cfg["bias"]}},
        }
    )
    pipe = SensorPipeline("gnss", spec, cfg["seed"])
    rng = np.random.default_rng(cfg["seed"])
    acc = GnssAccumulator("gnss", spec, LEVEL, 40.0, ORIGIN)
    o = ORIGIN
    for k in range(400):
        enu = rng.uniform(-500, 500, 3)
        pub = pipe.process(GnssTruth(enu=enu), k * 100_000_000)
        lla_t = np.array(pymap3d.enu2geodetic(*enu, o.lat, o.lon, o.alt))
        lla_p = np.array(pymap3d.enu2geodetic(*pub.sample.enu, o.lat, o.lon, o.alt))
        acc.add(Pair(k * 100_000_000, pub.publish_ns, lla_t, lla_p))
    return acc.metrics()


def test_gnss_error_model_recovered_through_geodesy() -> None:
    GNSS.clear()
    _collect_gnss()
    misses = 0
    checks = 0
    for cfg, m in GNSS:
        for a, axis in enumerate("enu"):
            misses += not covers(m[f"position_std_{axis}"], cfg["sigma"][a])
            misses += not covers(m[f"position_bias_{axis}"], cfg["bias"][a])
            checks += 2
    assert misses <= max_misses(checks), (misses, checks)


@settings(max_examples=20, derandomize=True, deadline=None, database=None)
@given(
    st.floats(-0.5, 0.5),
    st.tuples(*[st.floats(-1.0, 1.0)] * 3),
    st.integers(0, 2**32 - 1),
)
def test_a_noise_free_sensor_is_judged_exact(bias: float, enu_bias: tuple, seed: int) -> None:
    """sigma 0, any bias: the published values' own round-off (float32 points; degrees to ENU)
    must not FAIL a sensor that is exactly as configured (the bands had zero width), and a
    normality test has no noise to test."""
    exact = {"point": 0.0, "sample": 0.0, "fixed_ms": 0.0, "jitter_frac": 0.0, "rate": 10.0}
    lidar = run_lidar({"sigma": 0.0, "bias": bias, "seed": seed, **exact})
    gnss = run_gnss({"sigma": (0.0, 0.0, 0.0), "bias": enu_bias, "seed": seed})
    judged = [lidar[f"range_{k}"] for k in ("bias", "std", "rmse", "lateral_rms")]
    judged += [gnss[f"position_{k}_{a}"] for k in ("bias", "std", "rmse") for a in "enu"]
    assert all(m["verdict"] == "pass" for m in judged), judged
    untested = [lidar["range_normality"], *(gnss[f"position_normality_{a}"] for a in "enu")]
    assert all(m["verdict"] == "not_applicable" for m in untested), untested


def test_imu_bias_walk_white_noise_and_bias_recovered() -> None:
    """With a bias random walk the verifier estimates white sigma from pair differences, the walk
    by Allan variance and the bias with the walk's own variance in its interval."""
    from simconform.adapters.base import ImuTruth
    from simconform.spec import ImuSpec
    from simconform.verify.metrics import ImuAccumulator

    spec = ImuSpec.model_validate(
        {
            "type": "imu",
            "rate_hz": 100,
            "noise": {
                "accel": {"bias": [0.1, 0.0, -0.1], "sigma": [0.01] * 3, "bias_walk": [0.01] * 3}
            },
        }
    )
    seeds, n = 30, 20_000
    misses = checks = 0
    zero = ImuTruth(accel=np.zeros(3), gyro=np.zeros(3), orientation=np.array([0, 0, 0, 1.0]))
    for seed in range(seeds):
        pipe = SensorPipeline("imu", spec, seed)
        acc = ImuAccumulator("imu", spec, LEVEL, n / 100)
        for k in range(n):
            pub = pipe.process(zero, k * 10_000_000)
            row = np.r_[pub.sample.accel, pub.sample.gyro]
            acc.add(Pair(k * 10_000_000, pub.publish_ns, np.zeros(6), row))
        m = acc.metrics()
        for a, axis in enumerate("xyz"):
            misses += not covers(m[f"accel_walk_{axis}"], 0.01)
            misses += not covers(m[f"accel_std_{axis}"], 0.01)
            misses += not covers(m[f"accel_bias_{axis}"], spec.noise.accel.bias[a])
            checks += 3
    assert misses <= max_misses(checks), (misses, checks)
