"""The ground-truth motion of a replay: base_link's pose at any time from sampled poses."""

from __future__ import annotations

import numpy as np
from scipy.interpolate import CubicSpline
from scipy.spatial.transform import Rotation, RotationSpline

from simconform.frames import Pose


class PoseStream:
    """Ground-truth motion of base_link in the map frame from sampled poses.

    Cubic spline in position and a rotation spline in orientation, so velocity and the IMU's
    second differences are continuous: linear interpolation would put all acceleration into
    spikes at the samples. Implements the backends' Motion protocol.
    """

    def __init__(self, times_ns: np.ndarray, positions: np.ndarray, rotations: Rotation) -> None:
        self.times_ns = np.asarray(times_ns, dtype=np.int64)
        self.positions = np.asarray(positions, dtype=float)
        self.rotations = rotations
        self.start_ns = int(self.times_ns[0])
        self.end_ns = int(self.times_ns[-1])
        rel = (self.times_ns - self.start_ns) * 1e-9
        self._pos = CubicSpline(rel, self.positions, axis=0)
        self._rot = RotationSpline(rel, rotations)

    def pose_at(self, t_ns: int | np.ndarray) -> Pose:
        t = np.asarray(t_ns, dtype=np.int64)
        if t.size and (t.min() < self.start_ns or t.max() > self.end_ns):
            raise ValueError(f"time outside ground truth [{self.start_ns}, {self.end_ns}] ns")
        rel = (t - self.start_ns) * 1e-9
        return Pose(np.asarray(self._pos(rel)), self._rot(rel))

    def shifted(self, offset_ns: int) -> PoseStream | Shifted:
        """The motion on a sensor's clock whose capture at stamp t happened at pose-stream
        time t + offset_ns (see align.py); itself for no offset."""
        return self if offset_ns == 0 else Shifted(self, offset_ns)


class Shifted:
    """A PoseStream read on another clock: pose_at(t) is the stream's pose at t + offset_ns
    (a pose stream late by d ms against a sensor has offset +d ms)."""

    def __init__(self, base: PoseStream, offset_ns: int) -> None:
        self.base, self.offset_ns = base, int(offset_ns)
        self.start_ns = base.start_ns - self.offset_ns
        self.end_ns = base.end_ns - self.offset_ns

    def pose_at(self, t_ns: int | np.ndarray) -> Pose:
        return self.base.pose_at(np.asarray(t_ns, dtype=np.int64) + self.offset_ns)
