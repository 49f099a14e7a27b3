"""Per-sensor accumulators (lidar, IMU, GNSS, odometry; the camera's is camera.py) on the common
base (accumulator.py), and `make_accumulator`, which picks a sensor's.
"""

from __future__ import annotations

import itertools

import numpy as np

from simconform.bag.messages import cloud_arrays, odom_pose
from simconform.pipeline.noise import se2_increment
from simconform.spec import CameraSpec, GnssSpec, ImuSpec, LidarSpec, OdomSpec
from simconform.verify import stats
from simconform.verify import tolerances as tl
from simconform.verify.accumulator import Accumulator, metric, not_applicable
from simconform.verify.pairing import Pair, Unpaired

AXES = ("x", "y", "z")
ENU = ("e", "n", "u")
PLANAR = ("x", "y", "yaw")


def along_ray(delta: np.ndarray, nominal: np.ndarray) -> np.ndarray:
    """|delta| (N, 3) signed by its direction along the nominal rays (N, 3): positive when the
    point lies farther along the ray. The lidar range error of the verifier, and the per-ray
    difference compare uses between two engines (so both mean the same)."""
    sign = np.sign(np.einsum("ij,ij->i", delta, nominal))
    return np.linalg.norm(delta, axis=1) * np.where(sign == 0, 1.0, sign)


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
    """Error of each published capture-to-capture increment (consecutive captures only; none
    across a gap of the bag, where captures may be missing)."""

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
            if a in self.pub and b in self.pub and not self.crosses_gap(a, b):
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
