"""Rigid-body poses and REP 103 conventions (x forward, y left, z up; quaternions x y z w).

A `Pose` holds one pose or a stack of N poses, so that a whole lidar sweep (one pose per
azimuth column) or a whole trajectory is transformed with one numpy call.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.spatial.transform import Rotation


@dataclass(frozen=True)
class Pose:
    """Transform from a child frame to a parent frame: p_parent = R @ p_child + t."""

    t: np.ndarray  # (3,) or (N, 3)
    rot: Rotation  # single or stack of N

    @staticmethod
    def identity() -> Pose:
        return Pose(np.zeros(3), Rotation.identity())

    @staticmethod
    def from_xyz_rpy(xyz, rpy) -> Pose:
        """Mount pose from xyz (m) and roll-pitch-yaw (rad), fixed axes X then Y then Z (URDF)."""
        return Pose(np.asarray(xyz, dtype=float), Rotation.from_euler("xyz", rpy))

    @staticmethod
    def from_xyz_quat(xyz, quat_xyzw) -> Pose:
        return Pose(np.asarray(xyz, dtype=float), Rotation.from_quat(quat_xyzw))

    def __len__(self) -> int:
        return 1 if self.t.ndim == 1 else self.t.shape[0]

    def __getitem__(self, idx) -> Pose:
        return Pose(self.t[idx], self.rot[idx])

    def compose(self, other: Pose) -> Pose:
        """self * other: express other's child frame in self's parent frame. The rotations'
        product is taken in numpy (quat_product): scipy's is 5x slower for a sweep's 360."""
        rot = Rotation.from_quat(quat_product(self.rot.as_quat(), other.rot.as_quat()))
        return Pose(self.rot.apply(other.t) + self.t, rot)

    def inverse(self) -> Pose:
        inv = self.rot.inv()
        return Pose(-inv.apply(self.t), inv)

    def apply(self, points: np.ndarray) -> np.ndarray:
        return self.rot.apply(points) + self.t

    def quat(self) -> np.ndarray:
        """Quaternion(s) x y z w with w >= 0, so that equal poses serialize identically."""
        q = np.atleast_2d(self.rot.as_quat())
        q = np.where(q[:, 3:4] < 0, -q, q)
        return q[0] if self.t.ndim == 1 else q

    def yaw(self) -> np.ndarray:
        return self.rot.as_euler("ZYX")[..., 0]


def quat_product(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Hamilton product of x y z w quaternions (..., 4): the rotation p then q in the body."""
    x1, y1, z1, w1 = np.moveaxis(p, -1, 0)
    x2, y2, z2, w2 = np.moveaxis(q, -1, 0)
    return np.stack(
        [
            w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
            w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
            w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
        ],
        axis=-1,
    )


def planar(x: float, y: float, yaw: float) -> Pose:
    return Pose(np.array([x, y, 0.0]), Rotation.from_euler("z", yaw))
