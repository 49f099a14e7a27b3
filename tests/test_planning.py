"""Sample-size planning, checked statistically: each closed form against Monte Carlo through
the verifier's own interval functions (hypothesis draws the noise configurations), the search,
the plans of the demo spec, and a small seed campaign of real runs of the planned length
(bench/planning.py runs a larger one)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats as sps

from conftest import REPO, cli
from simconform.spec import Latency, Spec, Tolerances, load_spec
from simconform.verify import power as pw
from simconform.verify import stats
from simconform.verify import tolerances as tl
from simconform.verify.accumulator import quantile_estimate
from simconform.verify.planning import allan_power, plan_spec

R = 400  # Monte Carlo replicates per drawn configuration
SETTINGS = settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
PLAN_SPEC = REPO / "tests" / "data" / "planning" / "spec.yaml"


def agrees(p: float, passes: int, reps: int = R, slack: float = 0.02) -> bool:
    """The Monte Carlo share within 4.5 binomial sd (plus a model slack) of the formula."""
    sd = math.sqrt(max(p * (1 - p), 0.01) / reps)
    return abs(passes / reps - p) <= 4.5 * sd + slack


def _rng(*key) -> np.random.Generator:
    return np.random.default_rng([abs(hash(round(k, 9))) % 2**32 for k in key])


@SETTINGS
@given(
    n=st.integers(3, 400),
    sigma=st.floats(1e-3, 10.0),
    target=st.floats(0.05, 0.97),
    level=st.sampled_from([0.9, 0.95, 0.99]),
)
def test_mean_power_matches_the_t_interval(n, sigma, target, level) -> None:
    # a half-width h that puts the power near `target` (so the check is not all 0 or 1)
    t = sps.t.ppf(0.5 + level / 2, n - 1)
    h = sigma / math.sqrt(n) * (t + sps.norm.ppf(0.5 + target / 2))
    p = pw.mean_t(n, sigma, h, level)
    rng = _rng(n, sigma, target, level)
    x = 1.0 + sigma * rng.standard_normal((R, n))
    passes = sum(
        stats.verdict(stats.mean_ci(row, level).ci, (1.0 - h, 1.0 + h)) == "pass" for row in x
    )
    assert agrees(p, passes), (p, passes / R)


@SETTINGS
@given(n=st.integers(4, 3000), rel=st.floats(0.03, 0.6), level=st.sampled_from([0.9, 0.95]))
def test_std_power_matches_the_chi_square_interval(n, rel, level) -> None:
    sigma = 0.3
    band = tl.sigma_band(sigma, Tolerances(sigma_rel=rel))
    p = pw.chi2_scale(n - 1, sigma**2, band[0] ** 2, band[1] ** 2, level)
    x = 0.7 + sigma * _rng(n, rel, level).standard_normal((R, n))
    passes = sum(stats.verdict(stats.std_ci(row, level).ci, band) == "pass" for row in x)
    assert agrees(p, passes), (p, passes / R)


@SETTINGS
@given(n=st.integers(20, 3000), bias=st.floats(0.0, 3.0), rel=st.floats(0.03, 0.5))
def test_rmse_power_matches_the_satterthwaite_interval(n, bias, rel) -> None:
    """The plan takes nu from the true moments; the verifier estimates them: a model slack."""
    sigma, level = 1.0, 0.95
    theta = bias**2 + sigma**2
    nu = 2 * n * theta**2 / (2 * sigma**4 + 4 * bias**2 * sigma**2)
    p = pw.chi2_scale(nu, theta, theta * (1 - rel) ** 2, theta * (1 + rel) ** 2, level)
    band = tl.relative_band(math.sqrt(theta), rel)
    x = bias + sigma * _rng(n, bias, rel).standard_normal((R, n))
    passes = sum(stats.verdict(stats.rmse_ci(row, level).ci, band) == "pass" for row in x)
    assert agrees(p, passes, slack=0.04), (p, passes / R)


@SETTINGS
@given(n=st.integers(1, 4000), p=st.floats(0.0, 0.3), d=st.floats(0.005, 0.1))
def test_wilson_power_is_exact(n, p, d) -> None:
    level = 0.95
    band = tl.dropout_band(p, Tolerances(dropout_abs=d))
    power = pw.wilson(n, p, *band, level)
    ks = _rng(n, p, d).binomial(n, p, R)
    passes = sum(stats.verdict(stats.wilson(int(k), n, level).ci, band) == "pass" for k in ks)
    assert agrees(power, passes, slack=0.0), (power, passes / R)


@SETTINGS
@given(
    n=st.integers(2, 300),
    q=st.sampled_from([0.5, 0.95]),
    jitter=st.floats(0.5, 20.0),
    rel=st.floats(0.005, 0.3),
)
def test_quantile_power_matches_the_order_statistic_interval(n, q, jitter, rel) -> None:
    lat = Latency(fixed_ms=100.0, jitter_ms=jitter)
    lo, hi = tl.latency_band(tl.latency_quantile_ms(lat, q), Tolerances(latency_rel=rel))
    k = lat.jitter_truncation
    f_lo = sps.truncnorm.cdf((lo - 100.0) / jitter, -k, k)
    f_hi = 1 - sps.truncnorm.cdf((hi - 100.0) / jitter, -k, k)
    p = pw.order_stat(n, q, f_lo, f_hi, 0.95)
    x = 100.0 + jitter * sps.truncnorm.rvs(-k, k, size=(R, n), random_state=_rng(n, q, rel))
    passes = sum(stats.verdict(quantile_estimate(row, q, 0.95).ci, (lo, hi)) == "pass" for row in x)
    assert agrees(p, passes, slack=0.0), (p, passes / R)


@settings(max_examples=6, deadline=None, derandomize=True)
@given(n=st.integers(100, 20000), walk=st.floats(0.002, 0.05), rel=st.floats(0.3, 1.2))
def test_allan_power_matches_the_walk_estimator(n, walk, rel) -> None:
    sigma, dt, reps = 0.02, 0.01, 200
    band = (walk * max(1 - rel, 0.0), walk * (1 + rel))
    p = allan_power(n, sigma, walk, dt, *band, 0.95)
    rng = _rng(n, walk, rel)
    steps = walk * math.sqrt(dt) * rng.standard_normal((reps, n))
    e = np.cumsum(steps, axis=1) - steps + sigma * rng.standard_normal((reps, n))
    passes = sum(
        stats.verdict(stats.allan_walk(row, dt, white_sigma=sigma).ci, band) == "pass" for row in e
    )
    assert agrees(p, passes, reps, slack=0.05), (p, passes / reps)


@SETTINGS
@given(sigma=st.floats(0.01, 5.0), h_rel=st.floats(0.02, 1.0), target=st.floats(0.5, 0.95))
def test_needed_is_the_smallest_count_reaching_the_power(sigma, h_rel, target) -> None:
    def power_of(n: int) -> float:
        return pw.mean_t(n, sigma, h_rel * sigma, 0.95)

    need = pw.needed(power_of, target)
    assert need.n is not None and power_of(need.n) >= target
    assert need.n == 2 or power_of(need.n - 1) < target


def test_demo_plan_matches_the_textbook_sample_sizes() -> None:
    plan = plan_spec(load_spec(REPO / "sensors_spec" / "rover.yaml"), 0.95, 0.8, {"lidar": 2700})
    z = sps.norm.ppf(0.975)
    # dropout 0 judged to 0.02 by Wilson: k = 0 always, upper end z^2 / (n + z^2) <= 0.02
    lidar = plan.find("lidar", "sample_dropout")
    assert lidar.n == math.ceil(z * z * 0.98 / 0.02)
    # a bias to 10 % of sigma at 80 % power: n ~ ((z_0.975 + z_0.9) / 0.1)^2 = 1051 (t: a few more)
    bias = plan.find("gnss", "position_bias_e")
    assert 1051 <= bias.n <= 1060 and bias.duration_s == pytest.approx(bias.n / 0.98 / 10, abs=0.2)
    assert plan.sensor_length("gnss") == (bias.duration_s, "position_bias_e")
    assert plan.sensor_length("camera")[1] == "sample_dropout"  # p = 0.05 +- 0.02: ~1270 frames
    assert all(m.duration_s is not None for m in plan.metrics)


def _walk_spec(walk_rel: float = 0.25) -> Spec:
    imu = {
        "type": "imu",
        "rate_hz": 100,
        "noise": {"accel": {"sigma": [0.02] * 3, "bias_walk": [0.01] * 3}},
        "tolerances": {"walk_rel": walk_rel},
    }
    return Spec.model_validate({"name": "w", "sensors": {"imu": imu}})


def test_a_walk_the_allan_estimator_cannot_resolve_is_said_to_be_so() -> None:
    walk = plan_spec(_walk_spec()).find("imu", "accel_walk_x")
    assert walk.duration_s is None and "walk_rel >=" in walk.why
    need = float(walk.why.split("walk_rel >= ")[1].split()[0])
    assert 0.25 < need < 1.0  # about 20 block pairs: a 95 % interval of roughly -25 % / +45 %
    assert plan_spec(_walk_spec(need * 1.1)).find("imu", "accel_walk_x").duration_s is not None


def test_a_camera_without_noise_is_planned_as_exact() -> None:
    """sigma 0: the verifier compares each frame with its exact prediction and PASSes from 3
    frames; the plan said intensity_std could "never" PASS."""
    cam = {"type": "camera", "rate_hz": 10, "width": 64, "height": 48, "hfov_deg": 90.0}
    spec = Spec.model_validate({"name": "c", "sensors": {"camera": cam}})
    for metric in ("intensity_bias", "intensity_std", "intensity_rmse"):
        m = plan_spec(spec).find("camera", metric)
        assert m.n == 3 and m.duration_s is not None and "exact" in m.note, m


def _campaign(tmp: Path, seeds: range, duration: float) -> list[dict]:
    from simconform.run import RunConfig, run
    from simconform.verify.verifier import verify_run

    out = []
    for seed in seeds:
        cfg = RunConfig(spec=PLAN_SPEC, seed=seed, out=tmp / f"s{seed}", duration=duration, jobs=0)
        out.append(verify_run(run(cfg, progress=False).out, write=False))
    return out


def test_a_run_of_the_planned_length_passes_at_about_the_stated_power(tmp_path) -> None:
    """8 real runs of the plan's length for every metric at once (P(all PASS) >= 0.8 as a
    product): at least 5 pass (P(<= 4 of 8) = 0.056 at 0.8).
    Runs of a quarter of that length mostly do not, and each INCONCLUSIVE says how much
    longer a run must be."""
    from simconform.run import RunConfig, load_inputs
    from simconform.verify.runlength import plan_inputs

    inp = load_inputs(RunConfig(spec=PLAN_SPEC))
    plan = plan_inputs(inp.spec, inp.world, inp.trajectory, 0.95, 0.8)
    assert plan.run_s is not None and 4 < plan.run_s < 15
    full = _campaign(tmp_path / "full", range(1, 9), plan.run_s)
    assert sum(r["verdict"] == "pass" for r in full) >= 5
    short = _campaign(tmp_path / "short", range(1, 4), round(plan.run_s / 4, 1))
    assert sum(r["verdict"] == "pass" for r in short) <= 1
    gnss = short[0]["sensors"]["gnss"]["metrics"]
    inc = [m for m in gnss.values() if m["verdict"] == "inconclusive"]
    assert inc and all("planned" in m and "INCONCLUSIVE" in m["note"] for m in inc)
    longer = [m for m in inc if m["planned"]["duration_s"] > short[0]["run"]["duration_s"]]
    assert longer and all(
        m["planned"]["more_s"] > 0 and "s longer than this one" in m["note"] for m in longer
    )


def test_plan_command_prints_every_metric_and_the_dominating_one() -> None:
    r = cli("plan", str(PLAN_SPEC))
    assert r.returncode == 0, r.stderr
    assert "dominated by" in r.stdout and "position_std_e" in r.stdout
    assert "every metric at once:" in r.stdout


def test_plan_refuses_a_bad_power_with_one_line() -> None:
    r = cli("plan", "--power", "1.5")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--power" in r.stderr


def test_run_duration_auto_records_the_planned_length(tmp_path) -> None:
    """`run --duration auto` plans (the same tables as --dry-run), says its choice on stderr
    and records exactly that length."""
    import json

    out = tmp_path / "auto"
    r = cli("run", "--spec", str(PLAN_SPEC), "--duration", "auto", "--out", str(out), "--jobs", "0")
    assert r.returncode in (0, 1), r.stderr
    chosen = float(r.stderr.split("--duration auto: ")[1].split(" s")[0])
    assert 4 < chosen < 15
    report = json.loads((out / "report" / "report.json").read_text())
    assert report["run"]["planned_duration_s"] == pytest.approx(chosen)
    dry = cli("run", "--spec", str(PLAN_SPEC), "--duration", "auto", "--dry-run", "--out",
              str(tmp_path / "dry"))  # fmt: skip
    assert dry.returncode == 0 and f"this run ({chosen:g} s)" in dry.stdout


def test_a_report_says_when_no_length_makes_a_metric_conclusive(tmp_path) -> None:
    """A real IMU run with a bias walk: the Allan walk metric is INCONCLUSIVE and its note
    says that no run length helps and why (planned duration None)."""
    from conftest import write_yaml
    from simconform.run import RunConfig, run
    from simconform.verify.verifier import verify_run

    spec = {
        "name": "walk",
        "sensors": {
            "imu": {
                "type": "imu",
                "rate_hz": 100,
                "noise": {"accel": {"sigma": [0.02] * 3, "bias_walk": [0.0005] * 3}},
            }
        },
    }
    path = write_yaml(tmp_path / "walk.yaml", spec)
    cfg = RunConfig(spec=path, seed=7, out=tmp_path / "run", duration=3.0, jobs=0)
    walk = verify_run(run(cfg, progress=False).out, write=False)["sensors"]["imu"]["metrics"][
        "accel_walk_x"
    ]
    assert walk["verdict"] == "inconclusive"
    assert walk["planned"]["duration_s"] is None and "at any run length" in walk["note"]
    assert "walk_rel >= 0.62" in walk["note"]


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    sigma=st.sampled_from([0.0, 1e-9, 0.02, 5.0, 1e6]),
    bias=st.sampled_from([0.0, -3.0, 1e6]),
    walk=st.sampled_from([0.0, 1e-6, 0.01, 100.0]),
    dropout=st.sampled_from([0.0, 0.5, 0.99]),
    rate=st.sampled_from([0.01, 1.0, 1000.0]),
    jitter=st.sampled_from([0.0, 1.0]),
)
def test_every_valid_spec_gets_a_plan(sigma, bias, walk, dropout, rate, jitter) -> None:
    """Extreme but valid noise models: every metric gets a length or the reason it has
    none, never an exception (the verifier plans every INCONCLUSIVE report)."""
    axis = {"bias": [bias] * 3, "sigma": [sigma] * 3}
    accel = {**axis, "bias_walk": [walk] * 3}
    latency = {"fixed_ms": 3 * jitter, "jitter_ms": jitter}
    rng = {"bias": bias, "sigma": sigma}
    sensors = {
        "imu": {"type": "imu", "rate_hz": rate, "noise": {"accel": accel}},
        "gnss": {"type": "gnss", "rate_hz": rate, "noise": {"position": axis},
                 "dropout": {"sample": dropout}, "latency": latency},
        "lidar": {"type": "lidar", "rate_hz": rate, "rings": {"count": 2}, "columns": 8,
                  "noise": {"range": rng}, "dropout": {"point": dropout}},
    }  # fmt: skip
    plan = plan_spec(
        Spec.model_validate({"name": "x", "sensors": sensors}), returns_per_sweep={"lidar": 10}
    )
    for m in plan.metrics:
        assert (m.duration_s is not None and m.duration_s >= 0) or m.why, m
        assert 0.0 <= m.power <= 1.0
