"""Angles and planar pose increments as numbers: kept apart from simconform.frames, whose scipy
Rotation import (scipy.spatial with scipy.sparse and scipy.linalg: 12 MB of a process and
0.1-0.2 s) the verifier and the noise pipeline, which only wrap angles, do not need; and apart
from pipeline/noise.py, whose camera noise loads numba, which the process that writes a report
does not (verify/sums.py)."""

from __future__ import annotations

import numpy as np


def wrap_angle(a):
    """Wrap angle(s) to [-pi, pi)."""
    return (np.asarray(a) + np.pi) % (2 * np.pi) - np.pi


def se2_increment(a, b) -> np.ndarray:
    """(dx, dy, dyaw) of planar pose b in the frame of pose a (each with x, y, yaw): the
    increment wheel odometry integrates (pipeline/noise.py) and the verifier differences."""
    c, s = np.cos(a.yaw), np.sin(a.yaw)
    dx, dy = b.x - a.x, b.y - a.y
    return np.array([c * dx + s * dy, -s * dx + c * dy, wrap_angle(b.yaw - a.yaw)])
