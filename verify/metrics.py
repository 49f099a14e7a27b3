"""Per-sensor accumulators: they take paired samples and produce the sensor's metrics.

Each metric is a dict with stable keys (see DESIGN.md, report.json): measured, ci, configured,
tolerance, verdict, n, unit, and for a normality check its p_value.
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy.stats import binom

from simconform.bag.messages import cloud_arrays, odom_pose
from simconform.pipeline.noise import se2_increment
from simconform.spec import CameraSpec, GnssSpec, ImuSpec, LidarSpec, OdomSpec
from simconform.verify import stats
from simconform.verify import tolerances as tl
from simconform.verify.pairing import Pair, Unpaired

AXES = ("x", "y", "z")
ENU = ("e", "n", "u")
PLANAR = ("x", "y", "yaw")


def metric(est: stats.Estimate, configured: float, band, unit: str, **extra) -> dict:
    out = {
        "measured": _f(est.value),
        "ci": [_f(est.ci[0]), _f(est.ci[1])],
        "configured": _f(configured),
        "tolerance": [_f(band[0]), _f(band[1])],
        "verdict": stats.verdict(est.ci, band),
        "n": int(est.n),
        "unit": unit,
    }
    out.update(extra)
    return out


def not_applicable(reason: str, unit: str = "") -> dict:
    return {"verdict": "not_applicable", "reason": reason, "unit": unit}


def _f(v) -> float | None:
    v = float(v)
    return v if np.isfinite(v) else None


def normality(x: np.ndarray, name: str) -> dict:
    """Anderson-Darling check; the verdict is set by the report with a family-wise level."""
    if len(x) < 8:
        return not_applicable("fewer than 8 error samples")
    a2, p = stats.anderson_normal(x)
    return {
        "measured": _f(a2),
        "p_value": _f(p),
        "n": int(min(len(x), 5000)),
        "unit": "A2",
        "verdict": "pending",
        "field": name,
    }


def quantile_estimate(x: np.ndarray, q: float, level: float) -> stats.Estimate:
    """Sample quantile with the distribution-free order-statistic interval."""
    n = len(x)
    if n < 2:
        return stats.Estimate(float("nan"), (float("nan"), float("nan")), n, level)
    a = (1 - level) / 2
    lo = int(max(binom.ppf(a, n, q) - 1, 0))
    hi = int(min(binom.ppf(1 - a, n, q), n - 1))
    s = np.sort(x)
    return stats.Estimate(float(np.quantile(x, q)), (float(s[lo]), float(s[hi])), n, level)


def along_ray(delta: np.ndarray, nominal: np.ndarray) -> np.ndarray:
    """|delta| (N, 3) signed by its direction along the nominal rays (N, 3): positive when the
    point lies farther along the ray. The lidar range error of the verifier, and the per-ray
    difference compare uses between two engines (so both mean the same)."""
    sign = np.sign(np.einsum("ij,ij->i", delta, nominal))
    return np.linalg.norm(delta, axis=1) * np.where(sign == 0, 1.0, sign)


class Accumulator:
    """Common part: capture stamps, publish delays, sample dropout, latency and rate."""

    def __init__(self, name: str, spec, level: float, duration_s: float) -> None:
        self.name = name
        self.spec = spec
        self.level = level
        self.duration_s = duration_s
        self.truth_stamps: list[int] = []
        self.pub_stamps: list[int] = []
        self.log_ns: list[int] = []
        self.samples: dict[str, dict] = {}  # error arrays for plots: field -> {errors, sigma, bias}

    def add(self, item: Pair | Unpaired) -> None:
        self.truth_stamps.append(item.stamp_ns)
        if isinstance(item, Pair):
            self.pub_stamps.append(item.stamp_ns)
            self.log_ns.append(item.log_ns)
            self.add_pair(item)
        else:
            self.add_unpaired(item)

    def add_pair(self, pair: Pair) -> None:
        raise NotImplementedError

    def add_unpaired(self, item: Unpaired) -> None:
        """A dropped sample; its truth matters only to sensors that integrate (odometry)."""

    def metrics(self) -> dict[str, dict]:
        out = self.field_metrics()
        out.update(self.common_metrics())
        return out

    def field_metrics(self) -> dict[str, dict]:
        raise NotImplementedError

    def common_metrics(self) -> dict[str, dict]:
        s, tol, lv = self.spec, self.spec.tolerances, self.level
        n_truth, n_pub = len(self.truth_stamps), len(self.pub_stamps)
        out = {
            "sample_dropout": metric(
                stats.wilson(n_truth - n_pub, n_truth, lv),
                s.dropout.sample,
                tl.dropout_band(s.dropout.sample, tol),
                "1",
            )
        }
        if n_pub == 0:
            for m in ("latency_ms", "rate_hz"):
                out[m] = not_applicable("nothing was published")
            return out
        lat = (np.asarray(self.log_ns) - np.asarray(self.pub_stamps)) / 1e6
        mean_ms = s.latency.fixed_ms  # symmetric truncation: the jitter has mean zero
        out["latency_ms"] = metric(
            stats.mean_ci(lat, lv), mean_ms, tl.latency_band(mean_ms, tol), "ms"
        )
        for q, key in ((0.5, "latency_p50_ms"), (0.95, "latency_p95_ms")):
            expect = tl.latency_quantile_ms(s.latency, q)
            out[key] = metric(
                quantile_estimate(lat, q, lv), expect, tl.latency_band(expect, tol), "ms"
            )
        mx = float(lat.max())
        bound = tl.latency_max_ms(s.latency)
        out["latency_max_ms"] = metric(
            stats.Estimate(mx, (mx, mx), len(lat), lv),
            bound,
            (0.0, tl.latency_band(bound, tol)[1]),
            "ms",
        )
        rate = tl.expected_rate(s.rate_hz, s.dropout.sample)
        out["rate_hz"] = metric(
            stats.rate_from_stamps(np.sort(np.asarray(self.log_ns)), lv),
            rate,
            tl.relative_band(rate, tol.rate_rel),
            "Hz",
        )
        return out

    def scalar_metrics(
        self,
        quantity: str,
        axis: str,
        e: np.ndarray,
        bias: float,
        sigma: float,
        unit: str,
        walk: float = 0.0,
        dt: float = 0.0,
    ) -> dict[str, dict]:
        """bias, std, rmse (+ bias random walk) and normality of one error series."""
        tol, lv = self.spec.tolerances, self.level
        sfx = f"_{axis}" if axis else ""
        self.samples[f"{quantity}{sfx}"] = {"errors": e, "sigma": sigma, "bias": bias, "unit": unit}
        if len(e) < 3:
            return {f"{quantity}_bias{sfx}": not_applicable("fewer than 3 paired samples", unit)}
        t_span = self.duration_s
        extra = walk**2 * t_span / 3.0 if walk > 0 else 0.0
        out = {
            f"{quantity}_bias{sfx}": metric(
                stats.mean_ci(e, lv, extra_var_of_mean=extra),
                bias,
                tl.bias_band(bias, sigma, tol),
                unit,
            )
        }
        if walk > 0:
            std = stats.std_from_pair_differences(e, lv, walk_var_per_step=walk**2 * dt)
            white = (np.diff(e)[::2] / np.sqrt(2.0)) if len(e) > 1 else e
        else:
            std = stats.std_ci(e, lv)
            white = e
        out[f"{quantity}_std{sfx}"] = metric(std, sigma, tl.sigma_band(sigma, tol), unit)
        rmse = tl.rmse_expected(bias, sigma, walk, t_span)
        out[f"{quantity}_rmse{sfx}"] = metric(
            stats.rmse_ci(e, lv), rmse, tl.relative_band(rmse, tol.sigma_rel), unit
        )
        if walk > 0:
            est = stats.allan_walk(e, dt, white_sigma=float(std.value), level=lv)
            out[f"{quantity}_walk{sfx}"] = metric(
                est, walk, tl.relative_band(walk, tol.walk_rel), f"{unit}/sqrt(s)"
            )
        out[f"{quantity}_normality{sfx}"] = normality(white, f"{quantity}{sfx}")
        return out


class LidarAccumulator(Accumulator):
    """Range error along each ray and per-point dropout, over every published sweep."""

    def __init__(self, name: str, spec: LidarSpec, level: float, duration_s: float) -> None:
        super().__init__(name, spec, level, duration_s)
        self.nominal = spec.directions()
        self.errors: list[np.ndarray] = []
        self.finite_truth = 0
        self.lost = 0
        self.spurious = 0

    @staticmethod
    def decode(msg) -> np.ndarray:
        f = cloud_arrays(msg)
        return np.stack([f["x"], f["y"], f["z"]], axis=-1)

    def add_pair(self, pair: Pair) -> None:
        truth, pub = pair.truth, pair.published
        if truth.shape != pub.shape or truth.shape[:2] != self.nominal.shape[:2]:
            raise ValueError(
                f"{self.name}: cloud shape {pub.shape[:2]} / truth {truth.shape[:2]} "
                f"does not match the spec's {self.nominal.shape[:2]} rings x columns"
            )
        tf = np.isfinite(truth[..., 0])
        pf = np.isfinite(pub[..., 0])
        both = tf & pf
        self.finite_truth += int(tf.sum())
        self.lost += int((tf & ~pf).sum())
        self.spurious += int((~tf & pf).sum())
        delta = pub[both].astype(np.float64) - truth[both].astype(np.float64)
        self.errors.append(along_ray(delta, self.nominal[both]))

    def field_metrics(self) -> dict[str, dict]:
        s = self.spec
        e = np.concatenate(self.errors) if self.errors else np.zeros(0)
        n = s.noise.range
        out = self.scalar_metrics("range", "", e, n.bias, n.sigma, "m")
        p = s.dropout.point
        out["point_dropout"] = metric(
            stats.wilson(self.lost, self.finite_truth, self.level),
            p,
            tl.dropout_band(p, s.tolerances),
            "1",
            spurious_points=self.spurious,
        )
        return out


class VectorAccumulator(Accumulator):
    """Sensors whose error is a small vector per sample (IMU, GNSS)."""

    def __init__(self, name: str, spec, level: float, duration_s: float) -> None:
        super().__init__(name, spec, level, duration_s)
        self.rows: list[tuple[int, np.ndarray, np.ndarray]] = []

    def add_pair(self, pair: Pair) -> None:
        self.rows.append((pair.stamp_ns, pair.truth, pair.published))

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        rows = sorted(self.rows, key=lambda r: r[0])
        if not rows:
            return np.zeros((0, 6)), np.zeros((0, 6))
        return np.array([r[1] for r in rows]), np.array([r[2] for r in rows])


class ImuAccumulator(VectorAccumulator):
    @staticmethod
    def decode(msg) -> np.ndarray:
        a, g = msg.linear_acceleration, msg.angular_velocity
        return np.array([a.x, a.y, a.z, g.x, g.y, g.z])

    def field_metrics(self) -> dict[str, dict]:
        s: ImuSpec = self.spec
        truth, pub = self.arrays()
        err = pub - truth
        out: dict[str, dict] = {}
        for j, (q, noise, unit) in enumerate(
            (("accel", s.noise.accel, "m/s^2"), ("gyro", s.noise.gyro, "rad/s"))
        ):
            for a, axis in enumerate(AXES):
                out.update(
                    self.scalar_metrics(
                        q,
                        axis,
                        err[:, 3 * j + a],
                        noise.bias[a],
                        noise.sigma[a],
                        unit,
                        noise.bias_walk[a],
                        1.0 / s.rate_hz,
                    )
                )
        return out


class GnssAccumulator(VectorAccumulator):
    def __init__(self, name: str, spec, level: float, duration_s: float, origin) -> None:
        super().__init__(name, spec, level, duration_s)
        self.origin = origin

    @staticmethod
    def decode(msg) -> np.ndarray:
        return np.array([msg.latitude, msg.longitude, msg.altitude])

    def field_metrics(self) -> dict[str, dict]:
        import pymap3d

        s: GnssSpec = self.spec
        o = self.origin
        truth, pub = self.arrays()
        if len(truth) == 0:
            return {"position_bias_e": not_applicable("nothing was published", "m")}
        te = np.stack(
            pymap3d.geodetic2enu(truth[:, 0], truth[:, 1], truth[:, 2], o.lat, o.lon, o.alt), 1
        )
        pe = np.stack(pymap3d.geodetic2enu(pub[:, 0], pub[:, 1], pub[:, 2], o.lat, o.lon, o.alt), 1)
        err = pe - te
        n = s.noise.position
        out: dict[str, dict] = {}
        for a, axis in enumerate(ENU):
            out.update(self.scalar_metrics("position", axis, err[:, a], n.bias[a], n.sigma[a], "m"))
        return out


class OdomAccumulator(Accumulator):
    """Error of each published capture-to-capture increment (consecutive captures only)."""

    def __init__(self, name: str, spec: OdomSpec, level: float, duration_s: float) -> None:
        super().__init__(name, spec, level, duration_s)
        self.truth: dict[int, object] = {}
        self.pub: dict[int, object] = {}

    decode = staticmethod(odom_pose)

    def add_pair(self, pair: Pair) -> None:
        self.truth[pair.stamp_ns] = pair.truth
        self.pub[pair.stamp_ns] = pair.published

    def add_unpaired(self, item: Unpaired) -> None:
        self.truth[item.stamp_ns] = item.truth

    def field_metrics(self) -> dict[str, dict]:
        s: OdomSpec = self.spec
        stamps = sorted(self.truth)
        errs = []
        for a, b in itertools.pairwise(stamps):
            if a in self.pub and b in self.pub:
                d_pub = se2_increment(self.pub[a], self.pub[b])
                d_true = se2_increment(self.truth[a], self.truth[b])
                e = d_pub - d_true
                e[2] = (e[2] + np.pi) % (2 * np.pi) - np.pi
                errs.append(e)
        err = np.array(errs) if errs else np.zeros((0, 3))
        n = s.noise.increment
        out: dict[str, dict] = {}
        units = ("m", "m", "rad")
        for a, axis in enumerate(PLANAR):
            out.update(
                self.scalar_metrics("increment", axis, err[:, a], n.bias[a], n.sigma[a], units[a])
            )
        return out


def make_accumulator(name: str, spec, level: float, duration_s: float, world_origin):
    if isinstance(spec, LidarSpec):
        return LidarAccumulator(name, spec, level, duration_s)
    if isinstance(spec, ImuSpec):
        return ImuAccumulator(name, spec, level, duration_s)
    if isinstance(spec, GnssSpec):
        return GnssAccumulator(name, spec, level, duration_s, world_origin)
    if isinstance(spec, OdomSpec):
        return OdomAccumulator(name, spec, level, duration_s)
    if isinstance(spec, CameraSpec):
        from simconform.verify.camera import CameraAccumulator

        return CameraAccumulator(name, spec, level, duration_s)
    raise TypeError(type(spec).__name__)
