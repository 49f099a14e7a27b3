"""Per-sensor accumulators (lidar, IMU, GNSS; the camera's is camera.py, the odometry's
odometry.py) on the common base (accumulator.py), and `make_accumulator`, which picks a
sensor's.
"""

from __future__ import annotations

import numpy as np

from simconform.bag.messages import cloud_xyz
from simconform.spec import CameraSpec, GnssSpec, ImuSpec, LidarSpec, OdomSpec
from simconform.verify import robust, stats
from simconform.verify import tolerances as tl
from simconform.verify.accumulator import (
    NO_NOISE,
    Accumulator,
    metric,
    normality,
    not_applicable,
)
from simconform.verify.lidar_edges import EdgeSplit
from simconform.verify.pairing import Pair
from simconform.verify.series import SeriesStats

AXES = ("x", "y", "z")
ENU = ("e", "n", "u")


def along_ray(delta: np.ndarray, nominal: np.ndarray) -> np.ndarray:
    """|delta| (N, 3) signed by its direction along the nominal rays (N, 3): positive when the
    point lies farther along the ray. The per-ray difference compare uses between two engines'
    points (a displacement in any direction is a disagreement there); the verifier's range
    error is `range_and_lateral`."""
    sign = np.sign(np.einsum("ij,ij->i", delta, nominal))
    return np.linalg.norm(delta, axis=1) * np.where(sign == 0, 1.0, sign)


def range_and_lateral(
    published: np.ndarray, truth: np.ndarray, nominal: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(range error, lateral misplacement) of published points against their true points
    (N, 3 each, sensor frame): the range error is the displacement projected on the true ray
    (the sensor frame's origin to the true point; the nominal ray where that has no length),
    as a lidar measures range; the lateral misplacement is what is left, across the ray (>= 0).
    A conforming sensor moves points along their rays only; timing errors move them sideways."""
    t = truth.astype(np.float64)
    delta = published.astype(np.float64) - t
    r = np.linalg.norm(t, axis=1)
    u = np.where((r > 0)[:, None], t / np.where(r > 0, r, 1.0)[:, None], nominal)
    p = delta * u
    # (x + z) + y: the order np.einsum("ij,ij->i") summed in here, written out so that the
    # compiled sweep (verify/lidar_sweep.py) gives the same bits on every machine
    e = (p[:, 0] + p[:, 2]) + p[:, 1]
    lateral = np.linalg.norm(delta - e[:, None] * u, axis=1)
    return e, lateral


SECTORS = 12  # azimuth sectors of the breakdown (30 deg each)


class LidarAccumulator(Accumulator):
    """Range error along each true ray, lateral misplacement and per-point dropout over every
    published sweep, in memory that does not grow with the run (verify/robust.py): moments,
    a fine histogram for the robust statistics, per-ring and per-sector sums and histograms,
    and a bounded sample for the normality test and plots. KEEP_ERRORS keeps every sweep's
    errors too (compare bootstraps whole captures)."""

    KEEP_ERRORS = False

    def __init__(self, name: str, spec: LidarSpec, level: float, duration_s: float) -> None:
        super().__init__(name, spec, level, duration_s)
        self.nominal = spec.directions()
        rings, cols = self.nominal.shape[:2]
        n = spec.noise.range
        scale = n.sigma if n.sigma > 0 else 1e-3
        # float32 x, y, z: a range rounds by up to ~1e-7 of itself (2^-22 leaves a margin)
        self.RESOLUTION = 2.0**-22 * spec.range.max
        self.sector_of = (np.arange(cols) * SECTORS) // cols
        self.split = EdgeSplit(n.bias, scale, rings, SECTORS)  # edge outliers: lidar_edges.py
        self.errors: list[np.ndarray] = []
        self.finite_truth = 0
        self.lost = 0
        self.spurious = 0

    @staticmethod
    def decode(msg) -> np.ndarray:
        return cloud_xyz(msg)

    def add_pair(self, pair: Pair) -> None:
        truth, pub = pair.truth, pair.published
        if truth.shape != pub.shape or truth.shape[:2] != self.nominal.shape[:2]:
            raise ValueError(
                f"{self.name}: cloud shape {pub.shape[:2]} / truth {truth.shape[:2]} "
                f"does not match the spec's {self.nominal.shape[:2]} rings x columns"
            )
        # range_and_lateral and lidar_edges.edge_rays of the paired rays, in one compiled pass
        from simconform.verify.lidar_sweep import sweep  # numba: as verify/sums.py

        sw = sweep(truth, pub, self.nominal, self.split.scale)
        self.finite_truth += sw.finite_truth
        self.lost += sw.lost
        self.spurious += sw.spurious
        self.split.add(sw.edge, sw.e, sw.lateral, sw.ring, self.sector_of[sw.col])
        if self.KEEP_ERRORS:
            self.errors.append(sw.e)

    def field_metrics(self) -> dict[str, dict]:
        s, lv, tol = self.spec, self.level, self.spec.tolerances
        n = s.noise.range
        st = self.split.chosen()
        sample = st.sample.values()
        self.samples["range"] = {"errors": sample, "sigma": n.sigma, "bias": n.bias, "unit": "m"}
        if st.moments.n < 3:
            out = {"range_bias": not_applicable("fewer than 3 paired points", "m")}
        else:
            skew, kurt = st.moments.shape()
            rob = robust.robust_summary(st.hist, lv) | {
                "skewness": skew,
                "excess_kurtosis": kurt,
            }
            out = {
                "range_bias": metric(
                    st.moments.mean_ci(lv),
                    n.bias,
                    tl.bias_band(n.bias, n.sigma, tol, self.RESOLUTION),
                    "m",
                    refit=st.moments.mean_ci,
                ),
                "range_std": metric(
                    st.moments.std_ci(lv),
                    n.sigma,
                    tl.sigma_band(n.sigma, tol, self.RESOLUTION),
                    "m",
                    refit=st.moments.std_ci,
                    robust=_clean(rob),
                ),
            }
            rmse = tl.rmse_expected(n.bias, n.sigma)
            out["range_rmse"] = metric(
                st.moments.rmse_ci(lv),
                rmse,
                tl.relative_band(rmse, tol.sigma_rel, self.RESOLUTION),
                "m",
                refit=st.moments.rmse_ci,
            )
            out["range_lateral_rms"] = metric(
                st.lateral.rmse_ci(lv),
                0.0,
                tl.lateral_band(n.sigma, tol),
                "m",
                refit=st.lateral.rmse_ci,
            )
            out["range_normality"] = (
                normality(sample, "range") if n.sigma > 0 else not_applicable(NO_NOISE)
            )
            out["range_edge_outliers"] = self.split.entry()
        p = s.dropout.point
        out["point_dropout"] = metric(
            stats.wilson(self.lost, self.finite_truth, self.level),
            p,
            tl.dropout_band(p, s.tolerances),
            "1",
            refit=lambda a: stats.wilson(self.lost, self.finite_truth, a),
            spurious_points=self.spurious,
        )
        return out

    def details(self) -> dict:
        """Per-ring and per-azimuth-sector breakdown of the range error (report `breakdown`)."""
        st = self.split.chosen()
        if st.moments.n < 3:
            return {}
        rob = robust.robust_summary(st.hist, self.level)
        med, sig = rob.get("median"), rob.get("robust_sigma")
        elev = np.rad2deg(self.spec.rings.elevations())
        rows = {}
        for key, sums, h, label in (
            ("per_ring", st.ring_sums, st.ring_hist, lambda i: {"elevation_deg": elev[i]}),
            (
                "per_sector",
                st.sector_sums,
                st.sector_hist,
                lambda i: {"azimuth_deg": [i * 360 / SECTORS, (i + 1) * 360 / SECTORS]},
            ),
        ):
            out_frac = (
                robust.outliers_by_group(h, med, sig)
                if med is not None and sig
                else np.full(sums.shape[1], np.nan)
            )
            rows[key] = [
                _clean({"index": i, **label(i)} | _group_row(sums[:, i], st.moments.shift))
                | {"outlier_fraction": _num(out_frac[i])}
                for i in range(sums.shape[1])
            ]
        return {
            "breakdown": rows
            | {
                "k_outlier": robust.K_OUTLIER,
                "outlier_resolution": st.ring_hist.width,
                "sectors": SECTORS,
            }
        }


def _group_row(s: np.ndarray, shift: float) -> dict:
    n = s[0]
    if n < 2:
        return {"n": int(n)}
    mean = s[1] / n
    var = max(s[2] - n * mean * mean, 0.0) / (n - 1)
    return {
        "n": int(n),
        "bias": shift + mean,
        "std": float(np.sqrt(var)),
        "rmse": float(np.sqrt((s[2] + 2 * shift * s[1] + n * shift * shift) / n)),
        "lateral_rms": float(np.sqrt(s[3] / n)),
    }


def _num(v) -> float | None:
    v = float(v)
    return v if np.isfinite(v) else None


def _clean(d: dict) -> dict:
    """JSON-ready: numpy scalars to float, NaN to None."""
    out = {}
    for k, v in d.items():
        if isinstance(v, (float, np.floating)):
            out[k] = _num(v)
        elif isinstance(v, (np.integer,)):
            out[k] = int(v)
        else:
            out[k] = v
    return out


class VectorAccumulator(Accumulator):
    """Sensors whose error is a small vector per sample (IMU, GNSS): one SeriesStats per axis
    (verify/series.py), fed in stamp order; `keep` also keeps every row (compare)."""

    BATCH = 1024  # released rows converted to errors at a time
    ORDERED = True

    def __init__(self, name: str, spec, level: float, duration_s: float) -> None:
        super().__init__(name, spec, level, duration_s)
        self.rows: list[tuple[int, np.ndarray, np.ndarray]] = []  # only with `keep`
        self.batch: list[tuple[np.ndarray, np.ndarray]] = []
        # (quantity, axis, bias, sigma, unit, walk) per error axis, and its series
        self.axes: list[tuple[str, str, float, float, str, float]] = []
        self.series: list[SeriesStats] = []

    def axis(self, quantity: str, axis: str, bias, sigma, unit: str, walk=0.0) -> None:
        self.axes.append((quantity, axis, float(bias), float(sigma), unit, float(walk)))
        self.series.append(SeriesStats(float(sigma), float(bias), walk > 0))

    def add_pair(self, pair: Pair) -> None:
        if self.keep:
            self.rows.append((pair.stamp_ns, pair.truth, pair.published))

    def add_ordered(self, stamp: int, pair: Pair) -> None:
        self.batch.append((pair.truth, pair.published))
        if len(self.batch) >= self.BATCH:
            self._convert()

    def finish(self) -> None:
        super().finish()
        self._convert()
        for ser in self.series:
            ser.end()

    def _convert(self) -> None:
        if not self.batch:
            return
        truth = np.array([b[0] for b in self.batch])
        pub = np.array([b[1] for b in self.batch])
        self.batch = []
        err = self.errors_of(truth, pub)
        for j, ser in enumerate(self.series):
            ser.extend(err[:, j])

    def errors_of(self, truth: np.ndarray, pub: np.ndarray) -> np.ndarray:
        """(k, axes) errors of k published samples against their truth."""
        raise NotImplementedError

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        rows = sorted(self.rows, key=lambda r: r[0])
        if not rows:
            return np.zeros((0, 6)), np.zeros((0, 6))
        return np.array([r[1] for r in rows]), np.array([r[2] for r in rows])

    def field_metrics(self) -> dict[str, dict]:
        if self.published == 0 and self.empty_metric is not None:
            return self.empty_metric
        out: dict[str, dict] = {}
        dt = 1.0 / self.spec.rate_hz
        for (q, axis, bias, sigma, unit, walk), ser in zip(self.axes, self.series, strict=True):
            out.update(self.scalar_metrics(q, axis, ser, bias, sigma, unit, walk, dt))
        if self.keep and self.rows:  # compare: every error, in stamp order
            truth, pub = self.arrays()
            err = self.errors_of(truth, pub)
            for j, (q, axis, *_) in enumerate(self.axes):
                self.samples[f"{q}_{axis}"]["errors"] = err[:, j]
        return out

    empty_metric: dict | None = None


class ImuAccumulator(VectorAccumulator):
    def __init__(self, name: str, spec: ImuSpec, level: float, duration_s: float) -> None:
        super().__init__(name, spec, level, duration_s)
        for q, noise, unit in (
            ("accel", spec.noise.accel, "m/s^2"),
            ("gyro", spec.noise.gyro, "rad/s"),
        ):
            for a, axis in enumerate(AXES):
                self.axis(q, axis, noise.bias[a], noise.sigma[a], unit, noise.bias_walk[a])

    @staticmethod
    def decode(msg) -> np.ndarray:
        a, g = msg.linear_acceleration, msg.angular_velocity
        return np.array([a.x, a.y, a.z, g.x, g.y, g.z])

    def errors_of(self, truth: np.ndarray, pub: np.ndarray) -> np.ndarray:
        return pub - truth


class GnssAccumulator(VectorAccumulator):
    RESOLUTION = 1e-6  # m: ENU from float64 degrees rounds by ~1e-9 m this far from the core

    def __init__(self, name: str, spec: GnssSpec, level: float, duration_s: float, origin) -> None:
        super().__init__(name, spec, level, duration_s)
        self.origin = origin
        n = spec.noise.position
        for a, axis in enumerate(ENU):
            self.axis("position", axis, n.bias[a], n.sigma[a], "m")
        self.empty_metric = {"position_bias_e": not_applicable("nothing was published", "m")}

    @staticmethod
    def decode(msg) -> np.ndarray:
        return np.array([msg.latitude, msg.longitude, msg.altitude])

    def errors_of(self, truth: np.ndarray, pub: np.ndarray) -> np.ndarray:
        import pymap3d

        o = self.origin
        te = np.stack(
            pymap3d.geodetic2enu(truth[:, 0], truth[:, 1], truth[:, 2], o.lat, o.lon, o.alt), 1
        )
        pe = np.stack(pymap3d.geodetic2enu(pub[:, 0], pub[:, 1], pub[:, 2], o.lat, o.lon, o.alt), 1)
        return pe - te


def make_accumulator(name: str, spec, level: float, duration_s: float, world_origin):
    if isinstance(spec, LidarSpec):
        return LidarAccumulator(name, spec, level, duration_s)
    if isinstance(spec, ImuSpec):
        return ImuAccumulator(name, spec, level, duration_s)
    if isinstance(spec, GnssSpec):
        return GnssAccumulator(name, spec, level, duration_s, world_origin)
    if isinstance(spec, OdomSpec):
        from simconform.verify.odometry import OdomAccumulator

        return OdomAccumulator(name, spec, level, duration_s)
    if isinstance(spec, CameraSpec):
        from simconform.verify.camera import CameraAccumulator

        return CameraAccumulator(name, spec, level, duration_s)
    raise TypeError(type(spec).__name__)
