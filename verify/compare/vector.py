"""IMU, GNSS and odometry truth of A against B: the difference per capture and axis
(informational)."""

from __future__ import annotations

import numpy as np

from simconform.angles import wrap_angle
from simconform.spec import GnssSpec, ImuSpec
from simconform.verify.compare.verdicts import informational, skipped
from simconform.world import Origin


class VectorTruthDiff:
    """IMU (accel, gyro), GNSS (ENU) and odometry (x, y, yaw) truth, B - A per capture."""

    def __init__(self, spec, origin: Origin) -> None:
        self.spec, self.origin = spec, origin
        self.rows: list[tuple[int, np.ndarray, np.ndarray]] = []

    def add(self, t_ns: int, a: np.ndarray, b: np.ndarray) -> None:
        self.rows.append((t_ns, np.asarray(a, dtype=float), np.asarray(b, dtype=float)))

    def diffs(self) -> tuple[list[tuple[str, str, str]], np.ndarray]:
        """[(quantity, axis, unit)] and the (captures, axes) differences B - A."""
        rows = sorted(self.rows, key=lambda r: r[0])
        a = np.array([r[1] for r in rows])
        b = np.array([r[2] for r in rows])
        s = self.spec
        if isinstance(s, ImuSpec):
            axes = [("accel", x, "m/s^2") for x in "xyz"] + [("gyro", x, "rad/s") for x in "xyz"]
            return axes, b - a
        if isinstance(s, GnssSpec):
            import pymap3d

            o = self.origin

            def enu(v: np.ndarray) -> np.ndarray:
                return np.stack(
                    pymap3d.geodetic2enu(v[:, 0], v[:, 1], v[:, 2], o.lat, o.lon, o.alt), 1
                )

            return [("position", x, "m") for x in "enu"], enu(b) - enu(a)
        d = b - a
        d[:, 2] = wrap_angle(d[:, 2])
        return [("pose", "x", "m"), ("pose", "y", "m"), ("pose", "yaw", "rad")], d

    def metrics(self) -> dict[str, dict]:
        if not self.rows:
            return {"paired_captures": skipped("no capture of this sensor in both runs")}
        axes, d = self.diffs()
        out = {}
        n = len(d)
        for j, (q, axis, unit) in enumerate(axes):
            e = d[:, j]
            out[f"{q}_diff_mean_{axis}"] = informational(e.mean(), unit, n)
            out[f"{q}_diff_std_{axis}"] = informational(
                np.std(e, ddof=1) if n > 1 else 0.0, unit, n
            )
            out[f"{q}_diff_maxabs_{axis}"] = informational(np.abs(e).max(), unit, n)
        return out
