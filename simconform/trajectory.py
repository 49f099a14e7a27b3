"""Prescribed trajectories of base_link in the map frame.

TUM files (t x y z qx qy qz qw) interpolate position linearly and orientation by SLERP.
2D waypoint files (t x y) get their heading from the path tangent, their height from the
world's ground (a ray cast straight down) and their pitch from the ground's slope along the path.
Times are kept as integer nanoseconds, parsed exactly from the decimal text.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from scipy.spatial.transform import Rotation, Slerp

from simconform.errors import UserError
from simconform.frames import Pose

if TYPE_CHECKING:
    from simconform.world import World

QUAT_NORM_TOL = 1e-3
TUM_COLUMNS = "t x y z qx qy qz qw"


class Trajectory:
    """Poses at strictly increasing integer-nanosecond stamps, interpolated in between."""

    def __init__(self, times_ns: np.ndarray, positions: np.ndarray, rotations: Rotation) -> None:
        self.times_ns = np.asarray(times_ns, dtype=np.int64)
        self.positions = np.asarray(positions, dtype=float)
        self.rotations = rotations
        self.start_ns = int(self.times_ns[0])
        self.end_ns = int(self.times_ns[-1])
        self._rel = (self.times_ns - self.start_ns).astype(float)
        self._slerp = Slerp(self._rel, rotations)

    def __len__(self) -> int:
        return len(self.times_ns)

    def pose_at(self, t_ns: int | np.ndarray) -> Pose:
        """base_link pose(s) in map at t_ns (scalar gives one Pose, array a stack)."""
        t = np.asarray(t_ns, dtype=np.int64)
        if t.size and (t.min() < self.start_ns or t.max() > self.end_ns):
            raise ValueError(f"time outside trajectory span [{self.start_ns}, {self.end_ns}] ns")
        rel = (t - self.start_ns).astype(float)
        i = np.clip(np.searchsorted(self._rel, rel, side="right") - 1, 0, len(self._rel) - 2)
        f = (rel - self._rel[i]) / (self._rel[i + 1] - self._rel[i])
        f = f[..., None]
        pos = self.positions[i] * (1 - f) + self.positions[i + 1] * f
        return Pose(pos, self._slerp(rel))

    def write_tum(self, path: str | Path) -> None:
        q = Pose(self.positions, self.rotations).quat()
        with open(path, "w") as fh:
            fh.write(f"# {TUM_COLUMNS}\n")
            for t, p, qq in zip(self.times_ns, self.positions, q, strict=True):
                fh.write(f"{format_seconds(int(t))} " + " ".join(f"{v:.9f}" for v in (*p, *qq)))
                fh.write("\n")


def format_seconds(t_ns: int) -> str:
    """Exact decimal seconds of an integer-nanosecond stamp (TUM and evo read it)."""
    sign = "-" if t_ns < 0 else ""
    s, ns = divmod(abs(t_ns), 1_000_000_000)
    return f"{sign}{s}.{ns:09d}"


def _parse(path: Path) -> tuple[list[int], list[list[float]], list[int]]:
    if not path.is_file():
        raise UserError(path, "", str(path), "expected an existing trajectory file")
    times, rows, lines = [], [], []
    for lineno, raw in enumerate(path.read_text().splitlines(), start=1):
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
            t_ns = int(Decimal(parts[0]) * 1_000_000_000)
            vals = [float(p) for p in parts[1:]]
        except (InvalidOperation, ValueError):
            raise UserError(path, f"line {lineno}", raw.strip(), "expected numbers") from None
        if not np.all(np.isfinite(vals)):
            raise UserError(path, f"line {lineno}", raw.strip(), "expected finite numbers")
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


def load_trajectory(path: str | Path, world: World | None = None) -> Trajectory:
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
        return Trajectory(np.array(times), data[:, :3], Rotation.from_quat(quat / norms[:, None]))
    if world is None:
        raise UserError(path, "columns", 3, "2D waypoints need a world to take z from the ground")
    return waypoints_to_trajectory(path, np.array(times), data[:, 0], data[:, 1], world, lines)


def waypoints_to_trajectory(
    path: Path | str,
    times_ns: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    world: World,
    lines: list[int] | None = None,
) -> Trajectory:
    """Put (t, x, y) on the ground: heading from the tangent, pitch from the ground's slope."""
    from simconform.adapters.raycast import Scene

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
            "expected a moving path: heading is undefined where waypoints repeat",
        )
    yaw = np.arctan2(dy, dx)
    pitch = -np.arctan2(dz, ds)  # nose up on a climb is negative pitch about y (REP 103)
    rot = Rotation.from_euler("ZYX", np.c_[yaw, pitch, np.zeros_like(yaw)])
    return Trajectory(times_ns, np.c_[x, y, z], rot)
