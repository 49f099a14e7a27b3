"""Angles as numbers: kept apart from simconform.frames, whose scipy Rotation import (scipy.spatial
with scipy.sparse and scipy.linalg: 12 MB of a process and 0.1-0.2 s) the verifier and the
noise pipeline, which only wrap angles, do not need."""

from __future__ import annotations

import numpy as np


def wrap_angle(a):
    """Wrap angle(s) to [-pi, pi)."""
    return (np.asarray(a) + np.pi) % (2 * np.pi) - np.pi
