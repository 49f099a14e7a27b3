"""Prescribed trajectories of base_link in the map frame.

Between the given poses (TUM files, t x y z qx qy qz qw) the path is interpolated in one of two
ways (`simconform run --interpolation`, recorded in run.json):

- "spline" (the default): C2, so that velocity, acceleration, angular rate and angular
  acceleration are continuous and the IMU sees no spikes at the knots. Position is an
  interpolating cubic spline (scipy CubicSpline) with not-a-knot end conditions: the first and
  last two segments are one cubic, which assumes nothing about the motion at the ends (a
  natural spline would force zero acceleration there, wrong for a path that starts or stops
  mid-turn) and keeps the O(h^4) accuracy of cubic interpolation up to the ends. Orientation is
  scipy's RotationSpline (a cubic in the rotation vector relative to each knot, with angular
  rate and angular acceleration continuous; at the two ends its angular rate is the mean rate
  of the end segment). Both pass exactly through the given poses.
- "linear": position linear and orientation SLERP between the poses (C0: velocity and
  angular rate jump at every knot). Runs recorded before the option existed are linear.

2D waypoint files (t x y) get their heading from the path tangent, their height from the
world's ground (a ray cast straight down) and their pitch from the ground's slope along the path,
at the waypoints; in between they are interpolated like a TUM file.
Times are kept as integer nanoseconds, parsed exactly from the decimal text.
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from scipy.interpolate import CubicSpline
from scipy.spatial.transform import Rotation, RotationSpline, Slerp

from simconform.errors import UserError, read_utf8
from simconform.fields import MAX_COORD_M
from simconform.frames import Pose, quat_product
from simconform.stamps import format_seconds

if TYPE_CHECKING:
    from simconform.world import World

QUAT_NORM_TOL = 1e-3
TUM_COLUMNS = "t x y z qx qy qz qw"
INTERPOLATIONS = ("spline", "linear")
DEFAULT_INTERPOLATION = "spline"
MAX_STAMP_S = 2**31  # builtin_interfaces/Time.sec is an int32
LEGACY_INTERPOLATION = "linear"  # what a run.json without an "interpolation" key used


def check_interpolation(value: str, field: str = "--interpolation", file=None) -> str:
    if value not in INTERPOLATIONS:
        raise UserError(file, field, value, "expected spline or linear")
    return value


def run_interpolation(manifest: dict) -> str:
    """The interpolation a recorded run's trajectory used (from its run.json)."""
    return manifest.get("interpolation") or LEGACY_INTERPOLATION


class Trajectory:
    """Poses at strictly increasing integer-nanosecond stamps, interpolated in between."""

    def __init__(
        self,
        times_ns: np.ndarray,
        positions: np.ndarray,
        rotations: Rotation,
        interpolation: str = DEFAULT_INTERPOLATION,
    ) -> None:
        self.times_ns = np.asarray(times_ns, dtype=np.int64)
        self.positions = np.asarray(positions, dtype=float)
        self.rotations = rotations
        self.interpolation = check_interpolation(interpolation, "interpolation")
        self.start_ns = int(self.times_ns[0])
        self.end_ns = int(self.times_ns[-1])
        self._rel = (self.times_ns - self.start_ns).astype(float)
        if interpolation == "linear":
            self._slerp = Slerp(self._rel, rotations)
        else:
            # in seconds: RotationSpline's solver tolerance is absolute in rad per time unit
            self._knots_s = self._rel * 1e-9
            self._pos_spline = CubicSpline(self._knots_s, self.positions, bc_type="not-a-knot")
            self._rot_spline = RotationSpline(self._knots_s, rotations)
            self._knot_quat = rotations.as_quat()

    def shifted(self, epoch_s: int) -> Trajectory:
        """The same motion on a clock `epoch_s` whole seconds later (a run's bag clock)."""
        if not epoch_s:
            return self
        times = self.times_ns + int(epoch_s) * 1_000_000_000
        return Trajectory(times, self.positions, self.rotations, self.interpolation)

    def __len__(self) -> int:
        return len(self.times_ns)

    def pose_at(self, t_ns: int | np.ndarray) -> Pose:
        """base_link pose(s) in map at t_ns (scalar gives one Pose, array a stack)."""
        t = np.asarray(t_ns, dtype=np.int64)
        if t.size and (t.min() < self.start_ns or t.max() > self.end_ns):
            raise ValueError(f"time outside trajectory span [{self.start_ns}, {self.end_ns}] ns")
        rel = (t - self.start_ns).astype(float)
        if self.interpolation == "spline":
            rel_s = rel * 1e-9  # as the knots were scaled: a knot's stamp gives its pose exactly
            return Pose(self._pos_spline(rel_s), self._rotation(rel_s))
        i = np.clip(np.searchsorted(self._rel, rel, side="right") - 1, 0, len(self._rel) - 2)
        f = (rel - self._rel[i]) / (self._rel[i + 1] - self._rel[i])
        f = f[..., None]
        pos = self.positions[i] * (1 - f) + self.positions[i + 1] * f
        return Pose(pos, self._slerp(rel))

    def _rotation(self, rel_s: np.ndarray) -> Rotation:
        """RotationSpline's value, knot rotation * exp(cubic rotation vector), with the product
        taken in numpy (scipy's Rotation product is 5x slower than the rest put together)."""
        k = self._knots_s
        i = np.clip(np.searchsorted(k, rel_s, side="right") - 1, 0, len(k) - 2)
        step = Rotation.from_rotvec(self._rot_spline.interpolator(rel_s)).as_quat()
        return Rotation.from_quat(quat_product(self._knot_quat[i], step))

    def write_tum(self, path: str | Path) -> None:
        q = Pose(self.positions, self.rotations).quat()
        with open(path, "w") as fh:
            fh.write(f"# {TUM_COLUMNS}\n")
            for t, p, qq in zip(self.times_ns, self.positions, q, strict=True):
                fh.write(f"{format_seconds(int(t))} " + " ".join(f"{v:.9f}" for v in (*p, *qq)))
                fh.write("\n")


def _parse(path: Path) -> tuple[list[int], list[list[float]], list[int]]:
    if not path.is_file():
        raise UserError(path, "", str(path), "expected an existing trajectory file")
    times, rows, lines = [], [], []
    text = read_utf8(path)
    for lineno, raw in enumerate(text.splitlines(), start=1):
        text = raw.split("#", 1)[0].strip()
        if not text:
            continue
        parts = text.replace(",", " ").split()
        if len(parts) not in (3, 8) or (rows and len(parts) != len(rows[0]) + 1):
            raise UserError(
                path,
                f"line {lineno}",
                raw.strip(),
                f"expected 8 columns ({TUM_COLUMNS}) or 3 columns (t x y waypoints), the same "
                "on every line",
            )
        try:
            t = Decimal(parts[0])
            vals = [float(p) for p in parts[1:]]
        except (InvalidOperation, ValueError):
            raise UserError(path, f"line {lineno}", raw.strip(), "expected numbers") from None
        if not (t.is_finite() and all(map(math.isfinite, vals))):
            raise UserError(path, f"line {lineno}", raw.strip(), "expected finite numbers")
        if not 0 <= t < MAX_STAMP_S:
            raise UserError(
                path,
                f"line {lineno}.t",
                parts[0],
                f"expected seconds in [0, {MAX_STAMP_S}) (a ROS 2 stamp's int32 seconds)",
            )
        if max(map(abs, vals[:3])) > MAX_COORD_M:
            raise UserError(
                path, f"line {lineno}", raw.strip(), f"expected |x|, |y|, |z| <= {MAX_COORD_M:g} m"
            )
        t_ns = int(t * 1_000_000_000)
        times.append(t_ns)
        rows.append(vals)
        lines.append(lineno)
    if len(times) < 2:
        raise UserError(path, "poses", len(times), "expected at least 2 poses")
    for a in range(1, len(times)):
        if times[a] <= times[a - 1]:
            raise UserError(
                path,
                f"line {lines[a]}.t",
                format_seconds(times[a]),
                f"expected time strictly greater than the previous pose's "
                f"{format_seconds(times[a - 1])} s",
            )
    return times, rows, lines


def load_trajectory(
    path: str | Path, world: World | None = None, interpolation: str = DEFAULT_INTERPOLATION
) -> Trajectory:
    path = Path(path)
    times, rows, lines = _parse(path)
    data = np.asarray(rows)
    if data.shape[1] == 7:
        quat = data[:, 3:7]
        norms = np.linalg.norm(quat, axis=1)
        bad = np.flatnonzero(np.abs(norms - 1) > QUAT_NORM_TOL)
        if bad.size:
            i = int(bad[0])
            raise UserError(
                path,
                f"line {lines[i]}.q",
                float(round(norms[i], 6)),
                f"expected a unit quaternion (norm within {QUAT_NORM_TOL} of 1)",
            )
        rot = Rotation.from_quat(quat / norms[:, None])
        return Trajectory(np.array(times), data[:, :3], rot, interpolation)
    if world is None:
        raise UserError(path, "columns", 3, "2D waypoints need a world to take z from the ground")
    return waypoints_to_trajectory(
        path, np.array(times), data[:, 0], data[:, 1], world, lines, interpolation
    )


def waypoints_to_trajectory(
    path: Path | str,
    times_ns: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    world: World,
    lines: list[int] | None = None,
    interpolation: str = DEFAULT_INTERPOLATION,
) -> Trajectory:
    """Put (t, x, y) on the ground: heading from the tangent, pitch from the ground's slope (at
    the waypoints; `interpolation` between them, as for a TUM file)."""
    from simconform.raycast import Scene

    z = Scene(world).ground_height(x, y)
    missing = np.flatnonzero(~np.isfinite(z))
    if missing.size:
        i = int(missing[0])
        where = f"line {lines[i]}" if lines else f"waypoint {i}"
        raise UserError(
            path, where, (float(x[i]), float(y[i])), "expected ground under the waypoint"
        )
    dx, dy, dz = np.gradient(x), np.gradient(y), np.gradient(z)
    ds = np.hypot(dx, dy)
    if np.any(ds <= 1e-9):
        i = int(np.flatnonzero(ds <= 1e-9)[0])
        where = f"line {lines[i]}" if lines else f"waypoint {i}"
        raise UserError(
            path,
            where,
            (float(x[i]), float(y[i])),
            "expected a moving path: the heading (the path's direction) is undefined where "
            "waypoints repeat or the path turns straight back",
        )
    yaw = np.arctan2(dy, dx)
    pitch = -np.arctan2(dz, ds)  # nose up on a climb is negative pitch about y (REP 103)
    rot = Rotation.from_euler("ZYX", np.c_[yaw, pitch, np.zeros_like(yaw)])
    return Trajectory(times_ns, np.c_[x, y, z], rot, interpolation)
